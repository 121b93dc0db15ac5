# The Clockwork image: `clockwork api|worker|schema migrate` and `clockwork-operator`.
# Build: docker build -t clockwork:dev .
FROM python:3.11-slim-bookworm AS build
WORKDIR /src
RUN python -m venv /opt/clockwork
COPY pyproject.toml README.md ./
COPY clockwork_svc ./clockwork_svc
COPY operator/clockwork_operator ./operator/clockwork_operator
RUN /opt/clockwork/bin/pip install --no-cache-dir '.[operator]'

FROM python:3.11-slim-bookworm
RUN groupadd --gid 10001 clockwork && useradd --uid 10001 --gid 10001 --no-create-home clockwork
COPY --from=build /opt/clockwork /opt/clockwork
ENV PATH=/opt/clockwork/bin:$PATH PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
USER 10001:10001
EXPOSE 7070 9464 8080
ENTRYPOINT ["clockwork"]
CMD ["--help"]
