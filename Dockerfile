# governed-exec as a container entrypoint.
#
#   docker build -t governed-exec .
#   docker run --rm -v "$PWD:/work" -v ge-state:/var/lib/governed-exec governed-exec \
#     run --goal /work/goal.json --manifest /work/manifest.json --trust /work/approver.pub \
#         --receipt /work/receipt.json --request /work/request.json
#
# The binary is static (scripts/build-static.sh), so the runtime stage only
# needs whatever the governed commands themselves need.
FROM rust:1-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src ./src
COPY crates ./crates
# Cargo.toml names this bench target; cargo refuses a manifest whose
# targets are missing (scripts/check-dockerfile.sh builds from exactly
# these COPYs to prove the list is complete).
COPY benches ./benches
COPY scripts/build-static.sh ./scripts/build-static.sh
RUN bash scripts/build-static.sh && cp "$(bash scripts/build-static.sh)" /governed-exec

FROM debian:bookworm-slim
COPY --from=build /governed-exec /usr/local/bin/governed-exec
# Receipts, the journal and the runner key live here; keep it on a volume so
# an unknown outcome survives a container restart and is never replayed.
ENV GOVERNED_EXEC_STATE_DIR=/var/lib/governed-exec
VOLUME ["/var/lib/governed-exec"]
WORKDIR /work
# As PID 1 governed-exec reaps every orphan and turns `docker stop`'s
# SIGTERM into a cancelled_reaped receipt (exit 143).
ENTRYPOINT ["/usr/local/bin/governed-exec"]
CMD ["--help"]
