# ringlimit developer targets. `make help` lists them.

GO          ?= go
IMAGE       ?= ringlimit:dev
COMPOSE     ?= docker-compose
PROJECT     ?= ringlimit
# Static, reproducible binaries: they run on the `scratch` image.
GOBUILD     := CGO_ENABLED=0 $(GO) build -trimpath -ldflags='-s -w'
# Certificates of the compose cluster: one directory per node under CERTS
# (mounted read-only), the CA key apart in CA_KEY (never mounted).
CERTS       ?= certs
CA_KEY      ?= certs-ca/ca.key
NODES       := ringlimit-1 ringlimit-2 ringlimit-3

.PHONY: help build docker certs up down logs test test-docker fleet demo proto vet clean bench-gubernator

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

build: ## build bin/ringlimitd and bin/ringlimit, statically linked
	$(GOBUILD) -o bin/ringlimitd ./cmd/ringlimitd
	$(GOBUILD) -o bin/ringlimit ./cmd/ringlimit

docker: build ## build the image $(IMAGE) from the binaries (FROM scratch, nothing pulled)
	docker build -t $(IMAGE) .

certs: $(CERTS)/ringlimit-3/node.crt ## make the CA, a certificate per node, a root client certificate and the gossip key (once)

$(CERTS)/ringlimit-3/node.crt:
	$(MAKE) build
	bin/ringlimit cert create-ca --certs-dir $(CERTS) --ca-key $(CA_KEY)
	bin/ringlimit cert create-client root --certs-dir $(CERTS) --ca-key $(CA_KEY)
	bin/ringlimit cert create-gossip-key --certs-dir $(CERTS)
	bin/ringlimit cert create-token operator --certs-dir $(CERTS)
	for n in $(NODES); do \
	  mkdir -p $(CERTS)/$$n && \
	  cp -p $(CERTS)/ca.crt $(CERTS)/gossip.key $(CERTS)/tokens $(CERTS)/client.root.crt $(CERTS)/client.root.key $(CERTS)/$$n/ && \
	  bin/ringlimit cert create-node $$n --host $$n,localhost,127.0.0.1 --certs-dir $(CERTS)/$$n --ca-key $(CA_KEY) || exit 1; \
	done

up: docker certs ## start the secure three-node cluster (HTTPS 127.0.0.1:18080-18082, gRPC 127.0.0.1:18091-18093, admin 127.0.0.1:18101-18103)
	@# The nodes never run as root: as root, they run as the image's user
	@# 65532, which is given the node directories (the keys are 0600).
	@uid=$$(id -u); gid=$$(id -g); \
	if [ "$$uid" = 0 ]; then uid=65532; gid=65532; chown -R $$uid:$$gid $(addprefix $(CERTS)/,$(NODES)); fi; \
	echo "starting the nodes as user $$uid:$$gid"; \
	RINGLIMIT_IMAGE=$(IMAGE) RINGLIMIT_CERTS=$(abspath $(CERTS)) RINGLIMIT_UID=$$uid RINGLIMIT_GID=$$gid $(COMPOSE) -p $(PROJECT) up -d
	@echo "try: bin/ringlimit check user:1 --addr 127.0.0.1:18091 --certs-dir $(CERTS)"
	@echo ' or: redis-cli -p 18111 --tls --cacert $(CERTS)/ca.crt -a "$$(cut -d, -f1 $(CERTS)/tokens)" --no-auth-warning CL.THROTTLE user123 15 30 60'
	@echo " or: curl -s --cacert $(CERTS)/ca.crt --cert $(CERTS)/client.root.crt --key $(CERTS)/client.root.key -d '{\"key\":\"k\",\"algorithm\":\"gcra\",\"limit\":10,\"period\":\"1m\",\"burst\":5}' https://127.0.0.1:18080/v1/check"

down: ## stop the cluster and remove its containers, network and volumes (the certificates stay)
	RINGLIMIT_CERTS=$(abspath $(CERTS)) $(COMPOSE) -p $(PROJECT) down -v --remove-orphans

logs: ## follow the cluster's logs
	$(COMPOSE) -p $(PROJECT) logs -f

test: ## run the tests as .ci/run does, but the docker-compose test skips (saying why) when Docker does not answer
	$(GO) test -race -count=1 -timeout 40m ./...
	$(GO) test -count=1 -run 'Alloc|Recycle' ./algo/ ./ring/ ./transport/

FLEET       ?= 20,50
FLEET_SEEDS ?= 2
fleet: ## roll every member of in-process fleets of FLEET members (default 20,50; FLEET_SEEDS seeds each) under load, then form them from 2 members under load, strict; then 10 join and 10 leave at once (reported, not strict: on a loaded machine a run can still put a key over while leaving); then the CPU of one membership change at 3 to 1,000 members
	RINGLIMIT_FLEET=$(FLEET) RINGLIMIT_FLEET_SEEDS=$(FLEET_SEEDS) RINGLIMIT_FLEET_CALLERS=64 RINGLIMIT_FLEET_STRICT=1 \
	  $(GO) test -count=1 -run TestFleetRollingRestart -v -timeout 60m ./node/
	RINGLIMIT_FLEET=$(FLEET) RINGLIMIT_FLEET_SEEDS=$(FLEET_SEEDS) RINGLIMIT_FLEET_CALLERS=64 RINGLIMIT_FLEET_STRICT=1 RINGLIMIT_FLEET_GROW=1 \
	  $(GO) test -count=1 -run TestFleetRollingRestart -v -timeout 60m ./node/
	RINGLIMIT_FLEET=$(FLEET) RINGLIMIT_FLEET_SEEDS=$(FLEET_SEEDS) RINGLIMIT_FLEET_CALLERS=64 RINGLIMIT_FLEET_BURST=10 \
	  $(GO) test -count=1 -run TestFleetRollingRestart -v -timeout 60m ./node/
	$(GO) test -run '^$$' -bench MembershipChange -benchtime 10x ./node/

test-docker: ## run only the docker-compose cluster test
	$(GO) test -count=1 -timeout 10m -run Docker -v ./cluster_test/

demo: ## an in-process cluster with a short load run
	$(GO) run ./cmd/ringlimit demo

proto: ## regenerate the gRPC code from transport/proto
	$(GO) generate ./transport/...

# Flags of cluster_test/gubernator (its -h lists them), e.g. GUBER_BENCH='-members 3 -rounds 1'.
GUBER_BENCH ?=

bench-gubernator: ## ringlimit and gubernator side by side on one hot key, in process (3 and 10 members, about 6 min; a module of its own)
	cd cluster_test/gubernator && nice -n 10 $(GO) run . $(GUBER_BENCH)

vet: ## gofmt and go vet
	@test -z "$$(gofmt -l .)" || { gofmt -l .; exit 1; }
	$(GO) vet ./...

clean: ## remove bin/ (not the certificates: rm -rf $(CERTS) $(dir $(CA_KEY)) to start over)
	rm -rf bin
