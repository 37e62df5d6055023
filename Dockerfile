# syntax=docker/dockerfile:1
# lnserve GPU image. The PyPI onnxruntime-gpu wheels (1.2x/1.3x) are built for CUDA 13 and cuDNN 9, which this
# base provides; override BASE to match a different onnxruntime-gpu build (e.g. a CUDA 12 one).
# Build: docker build -t lnserve .   Run: see docker-compose.yml (models are mounted at /models).
ARG BASE=nvidia/cuda:13.0.0-cudnn-runtime-ubuntu24.04

# --- build: a virtual environment with lnserve and its dependencies -----------------------------------
# g++ builds the fused LN-GRU step (an onnxruntime custom-op library, app/runtime/fused_op); only this stage
# has it, the runtime stage gets the built library inside the venv.
FROM ${BASE} AS build
ENV DEBIAN_FRONTEND=noninteractive PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-venv g++ \
    && rm -rf /var/lib/apt/lists/*
RUN python3 -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
WORKDIR /src
COPY pyproject.toml setup.py README.md ./
COPY lnserve ./lnserve
COPY models ./models
COPY converters ./converters
COPY app ./app
# torch only runs the reference backend (the CPU wheel keeps the image small); GPU inference is onnxruntime-gpu
RUN pip install --no-cache-dir --extra-index-url https://download.pytorch.org/whl/cpu .

# --- runtime: the same base, the venv, a non-root user ------------------------------------------------
FROM ${BASE} AS runtime
ENV DEBIAN_FRONTEND=noninteractive
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --system --gid 10001 lnserve \
    && useradd --system --uid 10001 --gid lnserve --create-home --home-dir /home/lnserve lnserve \
    && mkdir -p /models /data \
    && chown 10001:10001 /models /data
COPY --from=build /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    LNSERVE_HOST=0.0.0.0 \
    LNSERVE_PORT=8000 \
    LNSERVE_GALLERIES_DIR=/data/galleries \
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
