# slotproxy image: a static binary on distroless (CA certificates included,
# runs as user nonroot).
#
#   docker build --pull -t slotproxy .
#   docker run --rm -p 127.0.0.1:3307:3307 -p 127.0.0.1:9307:9307 slotproxy \
#       serve --config /etc/slotproxy/config.yaml --backend db.internal:3306
#
# The default command reads /etc/slotproxy/config.yaml. The one shipped
# below sets only listen (:3307) and metrics.listen (:9307: /metrics,
# /healthz, /readyz): add --backend, as above (arguments replace the whole
# default command, hence --config again), or mount your own file over it. Docker cannot run on our CI machines: keep this file correct by
# reading it against cmd/slotproxy and internal/config.

# go.mod needs Go >= 1.26.8, and the golang images set GOTOOLCHAIN=local:
# build with --pull if a cached golang:1.26 is older.
FROM golang:1.26 AS build
WORKDIR /src
# Modules first, so that a source change does not download them again.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# "slotproxy version" prints VERSION; when empty, "dev" (.git is not in the
# build context, see .dockerignore).
ARG VERSION=
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" \
        -o /out/slotproxy ./cmd/slotproxy
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

FROM gcr.io/distroless/static-debian12:nonroot AS demo
COPY --from=demo-build /out/slotbench /slotbench
COPY testdata/rules/repos.yaml /etc/slotproxy/rules/repos.yaml
ENTRYPOINT ["/slotbench"]
CMD ["--help"]

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/slotproxy /slotproxy
COPY --from=build /out/config.yaml /etc/slotproxy/config.yaml
EXPOSE 3307 9307
ENTRYPOINT ["/slotproxy"]
CMD ["serve", "--config", "/etc/slotproxy/config.yaml"]
