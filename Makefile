# ringlimit developer targets. `make help` lists them.

GO          ?= go
IMAGE       ?= ringlimit:dev
COMPOSE     ?= docker-compose
PROJECT     ?= ringlimit
# Static, reproducible binaries: they run on the `scratch` image.
GOBUILD     := CGO_ENABLED=0 $(GO) build -trimpath -ldflags='-s -w'

.PHONY: help build docker up down logs test test-docker demo proto vet clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

build: ## build bin/ringlimitd and bin/ringlimit, statically linked
	$(GOBUILD) -o bin/ringlimitd ./cmd/ringlimitd
	$(GOBUILD) -o bin/ringlimit ./cmd/ringlimit

docker: build ## build the image $(IMAGE) from the binaries (FROM scratch, nothing pulled)
	docker build -t $(IMAGE) .

up: docker ## start the three-node cluster (HTTP 127.0.0.1:18080-18082, gRPC 127.0.0.1:18091-18093)
	RINGLIMIT_IMAGE=$(IMAGE) $(COMPOSE) -p $(PROJECT) up -d
	@echo "try: curl -s -d '{\"key\":\"k\",\"algorithm\":\"gcra\",\"limit\":10,\"period\":\"1m\",\"burst\":5}' http://127.0.0.1:18080/v1/check"

down: ## stop the cluster and remove its containers, network and volumes
	$(COMPOSE) -p $(PROJECT) down -v --remove-orphans

logs: ## follow the cluster's logs
	$(COMPOSE) -p $(PROJECT) logs -f

test: ## run every test, the docker-compose test included when Docker answers
	$(GO) test -race -count=1 -timeout 40m ./...

test-docker: ## run only the docker-compose cluster test
	$(GO) test -count=1 -timeout 10m -run Docker -v ./cluster_test/

demo: ## an in-process cluster with a short load run
	$(GO) run ./cmd/ringlimit demo

proto: ## regenerate the gRPC code from transport/proto
	$(GO) generate ./transport/...

vet: ## gofmt and go vet
	@test -z "$$(gofmt -l .)" || { gofmt -l .; exit 1; }
	$(GO) vet ./...

clean: ## remove bin/
	rm -rf bin
