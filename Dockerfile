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
# The image has no shell, no curl, no CA bundle and no certificates: mount a
# certs directory made by `ringlimit cert` (ca.crt, node.crt, node.key; see
# `make certs`) and point RINGLIMIT_CERTS_DIR and RINGLIMIT_GOSSIP_KEY_FILE at
# it, or the daemon refuses to start (unless RINGLIMIT_INSECURE=true). The
# compose healthcheck runs `ringlimitd healthcheck` against the admin port.
# Every flag has a RINGLIMIT_* environment variable (see
# `docker run --rm ringlimit:dev --help`).
FROM scratch

COPY bin/ringlimitd /usr/local/bin/ringlimitd
COPY bin/ringlimit /usr/local/bin/ringlimit

# Not root: an unprivileged uid/gid (the "nonroot" of distroless images). All
# ports are above 1024.
USER 65532:65532

# Gossip (memberlist, TCP and UDP), peer gRPC (members only, mutual TLS),
# client gRPC (Limiter), client HTTPS (/v1/check, /v1/members), admin HTTP
# (/metrics, /healthz, /readyz; read-only, unauthenticated: do not publish it
# beyond the scraper and the probes).
EXPOSE 7946/tcp 7946/udp 7947/tcp 8081/tcp 8080/tcp 8082/tcp

ENV RINGLIMIT_BIND_ADDR=0.0.0.0

# /readyz on the admin port 127.0.0.1:$RINGLIMIT_ADMIN_PORT (default 8082).
HEALTHCHECK --interval=5s --timeout=3s --start-period=5s --retries=3 \
    CMD ["/usr/local/bin/ringlimitd", "healthcheck"]

# SIGTERM (docker stop) leaves the cluster and hands keys off within
# --shutdown-timeout (10 s by default): give `docker stop -t` at least that.
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/ringlimitd"]
