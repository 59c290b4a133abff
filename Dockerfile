# syntax=docker/dockerfile:1
# Multi-stage: build a static binary, run it as a non-root user.
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/hookgate . \
 && mkdir -p /out/data

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/hookgate /usr/local/bin/hookgate
COPY config.yaml /etc/hookgate/config.yaml
# The data directory must belong to the non-root user (uid 65532).
COPY --from=build --chown=65532:65532 /out/data /var/lib/hookgate/data
ENV HOOKGATE_DATA=/var/lib/hookgate/data
# The admin listener stays on loopback unless you publish it on purpose:
#   docker run -e HOOKGATE_ADMIN_TOKEN=... -e HOOKGATE_ADMIN_LISTEN=:8081 -p 8081:8081 ...
# (never without HOOKGATE_ADMIN_TOKEN: the config's fallback token is for local trials).
# Several gateways on one PostgreSQL database: the DSN comes from the environment,
#   docker run -e HOOKGATE_STORAGE=postgres -e HOOKGATE_POSTGRES_DSN=postgres://user:pass@db:5432/hookgate ...
EXPOSE 8080
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/hookgate"]
CMD ["serve", "-config", "/etc/hookgate/config.yaml"]
