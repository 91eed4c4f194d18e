# Atari environment server for openenv-ws.
#
#   docker build -t openenv-ws/atari .
#   docker run --rm -p 127.0.0.1:8000:8000 openenv-ws/atari
#
# BASE_IMAGE is any Debian-like image with python3 (3.11+) and its venv module.
# If .tmp/wheelhouse/ holds wheels for the package and all its dependencies
# (`pip wheel --wheel-dir .tmp/wheelhouse .`), the image is built from them
# without any network access; otherwise pip installs from the package index.
ARG BASE_IMAGE=python:3.11-slim

FROM ${BASE_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_ROOT_USER_ACTION=ignore
RUN python3 -m venv /opt/venv
COPY . /src/
RUN set -eu; \
    if ls /src/.tmp/wheelhouse/*.whl >/dev/null 2>&1; then \
        /opt/venv/bin/pip install --no-index --find-links /src/.tmp/wheelhouse openenv-ws; \
    else \
        /opt/venv/bin/pip install /src; \
    fi; \
    /opt/venv/bin/python -c "import openenv_ws, ale_py"

FROM ${BASE_IMAGE}
RUN groupadd --system --gid 10001 openenv \
    && useradd --system --uid 10001 --gid openenv --home-dir /home/openenv --create-home \
        --shell /usr/sbin/nologin openenv
COPY --from=build /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1
USER openenv
WORKDIR /home/openenv
EXPOSE 8000
# The server drains open sessions on SIGTERM before exiting.
STOPSIGNAL SIGTERM
HEALTHCHECK --interval=5s --timeout=3s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import sys, urllib.request; sys.exit(urllib.request.urlopen('http://127.0.0.1:8000/health', timeout=2).status != 200)"]
CMD ["openenv-ws", "serve", "--host", "0.0.0.0", "--port", "8000"]
