# ordo's image: one static binary, `ordo serve` by default.
#   docker build -t ordo .        (compose.yaml builds it too)

# GO_VERSION matches go.mod's go line: the golang image builds with GOTOOLCHAIN=local.
ARG GO_VERSION=1.26.8

FROM golang:${GO_VERSION} AS build
WORKDIR /src
# Modules first, so that a code change does not download them again.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o /out/ordo ./cmd/ordo

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/ordo /usr/local/bin/ordo
USER nonroot:nonroot
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/ordo"]
CMD ["serve"]
