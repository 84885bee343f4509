# slotproxy image: a static binary on an empty base image (scratch), with
# the CA certificates of the build image, a /tmp, and user 65532 (nonroot).
#
#   docker build --pull -t slotproxy .
#   docker run --rm -p 127.0.0.1:3307:3307 -p 127.0.0.1:9307:9307 slotproxy \
#       serve --config /etc/slotproxy/config.yaml --backend db.internal:3306
#
# The default command reads /etc/slotproxy/config.yaml. The one shipped
# below sets only listen (:3307) and metrics.listen (:9307: /metrics,
# /healthz, /readyz): add --backend, as above (arguments replace the whole
# default command, hence --config again), or mount your own file over it.
# The image has no shell and no curl: its HEALTHCHECK is "slotproxy health".
# Docker cannot run on our CI machines: keep this file correct by reading
# it against cmd/slotproxy and internal/config.

# go.mod needs Go >= 1.26.8, and the golang images set GOTOOLCHAIN=local:
# build with --pull if a cached golang:1.26 is older.
FROM golang:1.26 AS build
WORKDIR /src
# Modules first, so that a source change does not download them again.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# "slotproxy version" prints VERSION and COMMIT (docker build --build-arg
# VERSION=$(git describe --tags --always --dirty) --build-arg
# COMMIT=$(git rev-parse HEAD)); when empty, "dev" and "unknown" (.git is
# not in the build context, see .dockerignore).
ARG VERSION=
ARG COMMIT=
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION} -X main.commit=${COMMIT}" \
        -o /out/slotproxy ./cmd/slotproxy
# An empty /tmp for the image (large statements are spooled there).
RUN mkdir -p /out/tmp && touch /out/tmp/.keep
# The image's configuration: the proxy and its HTTP endpoint on every
# interface of the container (127.0.0.1, the default of metrics.listen,
# would be the container's own loopback), defaults for everything else, and
# no backend, so that forgetting --backend fails at startup with
# "backend: not set".
RUN printf '%s\n' \
        '# Default configuration of the slotproxy image. Mount your own file here' \
        '# (see config.yaml in the source repository for every key) or pass' \
        '# --backend HOST:PORT after "serve".' \
        'listen: ":3307"' \
        'metrics: {listen: ":9307"}' \
        > /out/config.yaml

# The demo load (docker-compose.yml, service "demo"): slotbench --demo
# against the compose file's MySQL and slotproxy. Build it with
# "docker build --target demo -t slotproxy-demo ."; the default target,
# below, is the slotproxy image.
FROM build AS demo-build
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o /out/slotbench ./cmd/slotbench

FROM scratch AS demo
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=demo-build /out/slotbench /slotbench
COPY testdata/rules/repos.yaml /etc/slotproxy/rules/repos.yaml
USER 65532:65532
ENTRYPOINT ["/slotbench"]
CMD ["--help"]

FROM scratch
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=build --chown=65532:65532 /out/tmp /tmp
COPY --from=build /out/slotproxy /slotproxy
COPY --from=build /out/config.yaml /etc/slotproxy/config.yaml
USER 65532:65532
EXPOSE 3307 9307
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s CMD ["/slotproxy", "health", "--config", "/etc/slotproxy/config.yaml"]
ENTRYPOINT ["/slotproxy"]
CMD ["serve", "--config", "/etc/slotproxy/config.yaml"]
