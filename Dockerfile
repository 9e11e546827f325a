# ringlimit image: the ringlimitd daemon and the ringlimit CLI on an empty base.
#
# No image is pulled: the binaries are built on the host beforehand, statically
# (CGO_ENABLED=0), and copied onto `scratch`. Build with
#
#     make docker            # = make build && docker build -t ringlimit:dev .
#
# or by hand:
#
#     CGO_ENABLED=0 go build -trimpath -o bin/ringlimitd ./cmd/ringlimitd
#     CGO_ENABLED=0 go build -trimpath -o bin/ringlimit  ./cmd/ringlimit
#     docker build -t ringlimit:dev .
#
# The image has no shell, no curl and no CA bundle: the compose healthcheck runs
# `ringlimitd healthcheck`, and mTLS between peers uses the CA file given with
# --tls-ca-file. Every flag has a RINGLIMIT_* environment variable (see
# `docker run --rm ringlimit:dev --help`).
FROM scratch

COPY bin/ringlimitd /usr/local/bin/ringlimitd
COPY bin/ringlimit /usr/local/bin/ringlimit

# Not root: an unprivileged uid/gid (the "nonroot" of distroless images). All
# ports are above 1024.
USER 65532:65532

# Gossip (memberlist, TCP and UDP), gRPC (Limiter and Peer services), HTTP
# (/v1/check, /v1/members, /metrics, /healthz, /readyz).
EXPOSE 7946/tcp 7946/udp 8081/tcp 8080/tcp

ENV RINGLIMIT_BIND_ADDR=0.0.0.0

# /readyz on 127.0.0.1:$RINGLIMIT_HTTP_PORT (default 8080).
HEALTHCHECK --interval=5s --timeout=3s --start-period=5s --retries=3 \
    CMD ["/usr/local/bin/ringlimitd", "healthcheck"]

# SIGTERM (docker stop) leaves the cluster and hands keys off within
# --shutdown-timeout (10 s by default): give `docker stop -t` at least that.
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/ringlimitd"]
