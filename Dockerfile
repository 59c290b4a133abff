# syntax=docker/dockerfile:1
# Multi-stage: build a static binary, run it as a non-root user.
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/hookgate .

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/hookgate /usr/local/bin/hookgate
COPY config.yaml /etc/hookgate/config.yaml
WORKDIR /var/lib/hookgate
ENV HOOKGATE_DATA=/var/lib/hookgate/data
EXPOSE 8080 8081
USER nonroot:nonroot
ENTRYPOINT ["/usr/local/bin/hookgate"]
CMD ["serve", "-config", "/etc/hookgate/config.yaml"]
