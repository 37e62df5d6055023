# lnserve image: the core install (serve, convert, export, pull, galleries; no torch, no extra). The default
# base serves GPU hosts: the PyPI onnxruntime-gpu wheels (1.2x/1.3x) are built for CUDA 13 and cuDNN 9, which
# it provides (override BASE to match another onnxruntime-gpu build). On a CPU host any Debian/Ubuntu base with
# python3 >= 3.11 in apt does, e.g. one made offline with debootstrap; the CPU build of onnxruntime then goes
# in (ONNXRUNTIME below), a few hundred MB smaller than the GPU one.
# Build: docker build -t lnserve .   Run: docker compose up   (see docs/docker.md for every build argument)
# No `# syntax=` line: nothing here needs a frontend image from a registry, so the build works offline.
ARG BASE=nvidia/cuda:13.0.0-cudnn-runtime-ubuntu24.04

# --- deps: a virtual environment with lnserve's dependencies (a layer that code changes leave cached) -----
# g++ builds the fused LN-GRU step (an onnxruntime custom-op library, app/runtime/fused_op) in the next
# stage; only these stages have it, the runtime stage gets the built library.
FROM ${BASE} AS deps
ENV DEBIAN_FRONTEND=noninteractive PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-venv g++ \
    && rm -rf /var/lib/apt/lists/*
RUN python3 -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
# Which onnxruntime: onnxruntime-gpu (CUDA when the host has it, CPU otherwise), onnxruntime (CPU only), or
# auto: the GPU build on a base with the CUDA runtime (nvidia/cuda's CUDA_VERSION, or libcudart), the CPU
# build elsewhere. Only the core's packages go in: no torch (the build fails if one slips in).
ARG ONNXRUNTIME=auto
# pip's own settings, passed through when given (pip reads them from the environment): a mirror, more
# indexes, a wheel folder, hosts without TLS, and a CA bundle where the network re-signs TLS (/pip/ca.crt).
ARG PIP_INDEX_URL
ARG PIP_EXTRA_INDEX_URL
ARG PIP_FIND_LINKS
ARG PIP_TRUSTED_HOST
ARG PIP_CERT
# docker/pip/ (wheels, a CA bundle; empty in git) reaches the build stages only, never the image
COPY docker/pip /pip
WORKDIR /src
COPY pyproject.toml ./
# lnserve itself goes to /opt/lnserve (next stage), which lnserve.pth puts on the venv's path
RUN for v in PIP_INDEX_URL PIP_EXTRA_INDEX_URL PIP_FIND_LINKS PIP_TRUSTED_HOST PIP_CERT; do \
        eval "[ -n \"\${$v:-}\" ]" || unset "$v"; \
    done \
    && case "$ONNXRUNTIME" in \
        auto) if [ -n "${CUDA_VERSION:-}" ] || python3 -c "import ctypes.util as u, sys; sys.exit(not u.find_library('cudart'))"; \
              then ort=onnxruntime-gpu; else ort=onnxruntime; fi ;; \
        onnxruntime|onnxruntime-gpu) ort=$ONNXRUNTIME ;; \
        *) echo "ONNXRUNTIME: onnxruntime, onnxruntime-gpu or auto, not '$ONNXRUNTIME'" >&2; exit 2 ;; \
    esac \
    && python3 -c "import tomllib, sys; deps = tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']; print(*(d.replace('onnxruntime-gpu', sys.argv[1], 1) for d in deps), sep='\n')" "$ort" > /tmp/requirements.txt \
    && echo "lnserve's core dependencies, with $ort:" && cat /tmp/requirements.txt \
    && pip install --no-cache-dir -r /tmp/requirements.txt \
    && if python3 -c "import torch" 2>/dev/null; then echo "torch is in the image: the core has none" >&2; exit 1; fi \
    && python3 -c "import sysconfig; open(sysconfig.get_path('purelib') + '/lnserve.pth', 'w').write('/opt/lnserve\n')"

# --- build: lnserve and its fused op, into /opt/lnserve ---------------------------------------------
FROM deps AS build
# build arguments are per stage: pip's again (setuptools, lnserve's build backend, comes from the index)
ARG PIP_INDEX_URL
ARG PIP_EXTRA_INDEX_URL
ARG PIP_FIND_LINKS
ARG PIP_TRUSTED_HOST
ARG PIP_CERT
COPY setup.py README.md ./
COPY lnserve ./lnserve
COPY models ./models
COPY converters ./converters
COPY app ./app
RUN for v in PIP_INDEX_URL PIP_EXTRA_INDEX_URL PIP_FIND_LINKS PIP_TRUSTED_HOST PIP_CERT; do \
        eval "[ -n \"\${$v:-}\" ]" || unset "$v"; \
    done \
    && pip install --no-cache-dir --no-deps --target /opt/lnserve . \
    && python3 -I -c "from lnserve.app.runtime import fused_op; assert fused_op.library_path().is_file(), 'fused op not built'"

# --- runtime: the same base, the venv, a non-root user ------------------------------------------------
FROM ${BASE} AS runtime
ENV DEBIAN_FRONTEND=noninteractive
# apt-get clean: a debootstrap base has no docker-clean hook, and apt's downloaded packages and caches
# (/var/cache/apt, ~85 MB) would stay in the image
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 \
    && apt-get clean \
    && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin \
    && groupadd --system --gid 10001 lnserve \
    && useradd --system --uid 10001 --gid lnserve --create-home --home-dir /home/lnserve lnserve \
    && mkdir -p /models /data \
    && chown 10001:10001 /models /data
COPY --from=deps /opt/venv /opt/venv
COPY --from=build /opt/lnserve /opt/lnserve
# LNSERVE_DEMO_IF_EMPTY: an empty /models volume serves the embedded demo model (and logs so), not a crash loop
ENV PATH=/opt/lnserve/bin:/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    LNSERVE_HOST=0.0.0.0 \
    LNSERVE_PORT=8000 \
    LNSERVE_GALLERIES_DIR=/data/galleries \
    LNSERVE_DEMO_IF_EMPTY=true \
    NUMBA_CACHE_DIR=/home/lnserve/.cache/numba
USER 10001:10001
WORKDIR /home/lnserve
# Compile the retrieval kernel into numba's cache now, so the first order-violation query of a container does
# not wait ~5 s for the JIT (numba recompiles by itself if the serving CPU differs from the building one).
RUN python3 -c "from lnserve.app.runtime.retrieval import get_kernel; assert get_kernel('numba').name == 'numba'"
VOLUME ["/models", "/data"]
EXPOSE 8000
# /ready: 200 once every model is loaded and warmed up (urlopen raises on 503)
HEALTHCHECK --interval=15s --timeout=5s --start-period=120s --retries=3 \
    CMD ["python3", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/ready', timeout=4)"]
STOPSIGNAL SIGTERM
ENTRYPOINT ["lnserve"]
CMD ["serve"]
