# Busbar's container image, built from source:
#
#   docker build -t busbar .
#   docker build -t busbar:v1.2.3 --build-arg VERSION=v1.2.3 --build-arg REVISION=$(git rev-parse HEAD) .
#   docker run -p 5672:5672 -p 5300:5300 -v busbar-data:/data busbar
#
# The result is FROM scratch: a static binary, a non-root user (65532), the
# store in the /data volume, listening on every interface inside the
# container. CI cannot pull base images, so it builds build/image/Containerfile
# instead (the same runtime part around a binary built on the host); see
# docs/container.md.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION
ARG REVISION
RUN CGO_ENABLED=0 go build -trimpath -o /out/busbar \
      -ldflags "-s -w ${VERSION:+-X github.com/busbarmq/busbar/internal/version.version=$VERSION} ${REVISION:+-X github.com/busbarmq/busbar/internal/version.commit=$REVISION}" \
      ./cmd/busbar \
 && sh build/image/rootfs.sh /out/image /out/busbar

FROM scratch
COPY --from=build /out/image/root/ /
COPY --from=build --chown=65532:65532 /out/image/user/ /
# -- runtime (keep identical to the Dockerfile's) --
ARG VERSION=dev
ARG REVISION=unknown
LABEL org.opencontainers.image.title="Busbar" \
      org.opencontainers.image.description="Azure Service Bus in one binary: queues, topics, sessions, over Service Bus's AMQP 1.0 dialect" \
      org.opencontainers.image.source="https://github.com/busbarmq/busbar" \
      org.opencontainers.image.licenses="MIT" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}"
ENV BUSBAR_DATA=/data \
    BUSBAR_AMQP=0.0.0.0:5672 \
    BUSBAR_HTTP=0.0.0.0:5300 \
    BUSBAR_AMQPS=0.0.0.0:5671 \
    BUSBAR_HTTPS=0.0.0.0:5301 \
    BUSBAR_DEV_TLS=true \
    BUSBAR_CONFIG_SEARCH=/config/Config.json:/ServiceBus_Emulator/ConfigFiles/Config.json
USER 65532:65532
VOLUME ["/data"]
EXPOSE 5672 5671 5300 5301
HEALTHCHECK --interval=10s --timeout=5s --start-period=5s --retries=3 CMD ["/busbar", "health"]
ENTRYPOINT ["/busbar"]
CMD ["serve"]
