# syntax=docker/dockerfile:1
# The hami-place server image: `hami-place-webhook serve` (the chart's Deployment) and
# `hami-place-webhook certs` (the chart's certificate hook Job). Build with ./build-image.sh.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# Stage 1: install the package and its dependencies into a self-contained virtualenv. Every dependency ships
# wheels for linux/amd64 and linux/arm64, so no compiler is needed even here.
FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ONLY_BINARY=cryptography
WORKDIR /src
RUN python -m venv /opt/hami-place
COPY pyproject.toml constraints.txt README.md LICENSE ./
COPY kubectl_hami_place ./kubectl_hami_place
COPY webhook ./webhook
# The server's set at the versions of constraints.txt (the lock `make` and the release jobs install from too).
# pip compiles the bytecode here: the final image's root filesystem is read-only, so it could not at run time.
RUN /opt/hami-place/bin/pip install -c constraints.txt '.[server]' \
 && /opt/hami-place/bin/pip uninstall --yes pip setuptools

# Stage 2: the same Python, the virtualenv, nothing else: no pip, no compiler, no shell tools beyond the base.
FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="hami-place-webhook" \
      org.opencontainers.image.description="Placement admission webhook for HAMi GPU clusters" \
      org.opencontainers.image.licenses="Apache-2.0"
RUN python -m pip uninstall --yes pip setuptools wheel 2>/dev/null || true
COPY --from=build /opt/hami-place /opt/hami-place
COPY LICENSE /usr/share/doc/hami-place/LICENSE
ENV PATH=/opt/hami-place/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
# The chart runs it read-only as 65532 (the distroless "nonroot" id); no passwd entry is needed.
USER 65532:65532
EXPOSE 8443 8083
ENTRYPOINT ["hami-place-webhook"]
CMD ["serve"]
