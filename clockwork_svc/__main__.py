from clockwork_svc.cli.main import main

main()
