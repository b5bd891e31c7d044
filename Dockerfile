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

# --- build: compile src/ into dist/ ------------------------------------------------------
# Only the product: the development tooling (dev/, built by `npm run build` into
# dist-dev/) is not in the build context at all.
FROM node:26-trixie-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --ignore-scripts --no-audit --no-fund
COPY tsconfig.json ./
COPY src ./src
RUN npm run build:product

# --- prod-deps: production dependencies only ---------------------------------------------
FROM node:26-trixie-slim AS prod-deps
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --ignore-scripts --no-audit --no-fund

# --- runtime -------------------------------------------------------------------------------
FROM gcr.io/distroless/nodejs26-debian13:nonroot
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
