#!/usr/bin/env bash
# Builds (and optionally pushes) the hami-place server image from ./Dockerfile with docker buildx.
set -euo pipefail

usage() {
  cat <<USAGE
Usage: $0 [--image REPO] [--tag TAG] [--platform LIST] [--push] [--print]

  --image REPO      image repository (default: \$IMAGE or ghcr.io/hami-place/hami-place-webhook)
  --tag TAG         image tag (default: \$TAG or the version, kubectl_hami_place/__init__.py's __version__)
  --platform LIST   comma-separated platforms (default: \$PLATFORM or linux/amd64), e.g. linux/amd64,linux/arm64
  --push            push to the registry (needed for more than one platform: a multi-platform image cannot be
                    loaded into the local image store)
  --print           print the build command instead of running it
USAGE
}

cd "$(dirname "$0")"
image="${IMAGE:-ghcr.io/hami-place/hami-place-webhook}"
tag="${TAG:-$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' kubectl_hami_place/__init__.py | head -n1)}"
platform="${PLATFORM:-linux/amd64}"
push=false
print=false

value() {
  if [[ $# -lt 2 || -z "$2" || "$2" == --* ]]; then
    echo "error: $1 needs a value (see $0 --help)" >&2
    exit 2
  fi
}

while [[ $# -gt 0 ]]; do
  case "$1" in
    --image) value "$@"; image="$2"; shift 2 ;;
    --tag) value "$@"; tag="$2"; shift 2 ;;
    --platform) value "$@"; platform="$2"; shift 2 ;;
    --push) push=true; shift ;;
    --print) print=true; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "error: unknown argument '$1' (see $0 --help)" >&2; exit 2 ;;
  esac
done

if [[ -z "$tag" ]]; then
  echo "error: no --tag given and no __version__ found in kubectl_hami_place/__init__.py" >&2
  exit 2
fi
if [[ "$push" == false && "$platform" == *,* ]]; then
  echo "error: a multi-platform image ($platform) can only be pushed: add --push, or build one platform" >&2
  exit 2
fi

cmd=(docker buildx build --platform "$platform" --tag "$image:$tag" --file Dockerfile)
if [[ "$push" == true ]]; then cmd+=(--push); else cmd+=(--load); fi
cmd+=(.)

if [[ "$print" == true ]]; then
  printf '%q ' "${cmd[@]}"; echo
  exit 0
fi

if ! command -v docker >/dev/null 2>&1; then
  echo "error: docker is not installed or not on PATH; install Docker with the buildx plugin (or run with --print to see the command)" >&2
  exit 1
fi
if ! docker buildx version >/dev/null 2>&1; then
  echo "error: the docker buildx plugin is missing; install it (https://docs.docker.com/go/buildx/) and retry" >&2
  exit 1
fi

echo "building $image:$tag for $platform" >&2
"${cmd[@]}"
