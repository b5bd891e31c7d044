# syntax=docker/dockerfile:1
#
# crd-migrator container image.
#   docker build -t <registry>/crd-migrator:<tag> .
#
# Build with the dev dependencies (TypeScript), install the production dependencies
# separately, and run on distroless Node.js 26 LTS as the non-root user: no shell, no
# package manager at run time. One Node.js major everywhere: the major of .node-version
# (what .ci/run and the tests use), package.json engines, and all stages below; build
# stages on Debian 13 (trixie) like the distroless run time. test/unit/dockerfile.test.ts
# checks this file and test/integration/dockerfile-prod.test.ts runs the production install
# and the built CLI.
#
# Base images are pinned by digest (multi-platform image indexes), so a build today and one
# next month start from the same bytes; the tag beside each digest says what it is and is
# what to look up when updating (e.g. `crane digest node:26-trixie-slim`): node 26.10.0 on
# Debian 13 (docker-library's node:26-trixie-slim of 2026-09-22), and the distroless
# Node.js 26 nonroot image of the same time.
#
# Release builds set the OCI labels' build arguments, e.g.
#   docker build --build-arg REVISION="$(git rev-parse HEAD)" \
#     --build-arg SOURCE=https://github.com/<org>/crd-migrator -t <registry>/crd-migrator:0.1.0 .
# VERSION defaults to package.json's version (test/unit/dockerfile.test.ts keeps them equal).

# --- build: compile src/ into dist/ ------------------------------------------------------
# Only the product: the development tooling (dev/, built by `npm run build` into
# dist-dev/) is not in the build context at all.
FROM node:26-trixie-slim@sha256:ec7758ee051e457b468b32bde57b0879010b325bb9862718e9615225ce4aaae1 AS build
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --ignore-scripts --no-audit --no-fund
COPY tsconfig.json ./
COPY src ./src
RUN npm run build:product

# --- prod-deps: production dependencies only ---------------------------------------------
FROM node:26-trixie-slim@sha256:ec7758ee051e457b468b32bde57b0879010b325bb9862718e9615225ce4aaae1 AS prod-deps
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --ignore-scripts --no-audit --no-fund

# --- runtime -------------------------------------------------------------------------------
FROM gcr.io/distroless/nodejs26-debian13:nonroot@sha256:2ee7b2c54a3e37dfc248af81c9f6bcdcaa50abe4af44aa47a3388431031b9283
ARG VERSION=0.1.0
ARG REVISION=""
ARG SOURCE=""
LABEL org.opencontainers.image.title="crd-migrator" \
      org.opencontainers.image.description="Migrates CustomResourceDefinitions off old apiVersions: storage version migration, status.storedVersions and managedFields cleanup, guarded by a KEP-2855 validating webhook." \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.source="${SOURCE}"
WORKDIR /app
ENV NODE_ENV=production
COPY --from=prod-deps /app/node_modules ./node_modules
COPY --from=build /app/dist ./dist
COPY package.json ./
# distroless' nonroot user (uid/gid 65532), which the Helm chart's securityContext uses too.
USER 65532:65532
# 9443: the webhook (HTTPS); 8080: /metrics, /healthz, /readyz (HTTP).
EXPOSE 9443 8080
ENTRYPOINT ["/nodejs/bin/node", "dist/cli/main.js"]
CMD ["serve"]
