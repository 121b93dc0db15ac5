"""The Clockwork Kubernetes operator: reconciles `ClockworkSchedule` resources into
Clockwork schedules through the gRPC API, and sizes the worker Deployment by the
load the workers report. Run it with `python -m clockwork_operator`."""
