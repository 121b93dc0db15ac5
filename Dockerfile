# The Clockwork image: `clockwork api|worker|schema migrate` and `clockwork-operator`.
# Build: docker build -t clockwork:dev .
#
# The pinned dependencies are installed in a layer of their own, keyed on their list
# alone: a change to the code or to the version rebuilds only the last install.
FROM python:3.11-slim-bookworm AS requirements
COPY pyproject.toml /src/
RUN python -c "import tomllib; p = tomllib.load(open('/src/pyproject.toml', 'rb'))['project']; \
print('\n'.join(p['dependencies'] + p['optional-dependencies']['operator']))" > /requirements.txt

FROM python:3.11-slim-bookworm AS build
WORKDIR /src
RUN python -m venv /opt/clockwork
COPY --from=requirements /requirements.txt ./
RUN /opt/clockwork/bin/pip install --no-cache-dir -r requirements.txt
COPY pyproject.toml README.md ./
COPY clockwork_svc ./clockwork_svc
COPY operator/clockwork_operator ./operator/clockwork_operator
RUN /opt/clockwork/bin/pip install --no-cache-dir --no-deps . \
 && /opt/clockwork/bin/pip check

FROM python:3.11-slim-bookworm
RUN groupadd --gid 10001 clockwork && useradd --uid 10001 --gid 10001 --no-create-home clockwork
COPY --from=build /opt/clockwork /opt/clockwork
ENV PATH=/opt/clockwork/bin:$PATH PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
USER 10001:10001
EXPOSE 7070 9464 8080
ENTRYPOINT ["clockwork"]
CMD ["--help"]
