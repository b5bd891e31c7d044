# syntax=docker/dockerfile:1
#
# crd-migrator container image.
#   docker build -t <registry>/crd-migrator:<tag> .
#
# Build with the dev dependencies (TypeScript), install the production dependencies
# separately, and run on distroless Node.js 22 LTS as the non-root user: no shell, no
# package manager at run time. test/unit/dockerfile.test.ts checks this file and
# test/integration/dockerfile-prod.test.ts runs the production install and the built CLI.

# --- build: compile src/ into dist/ ------------------------------------------------------
# Only the product: the development tooling (dev/, built by `npm run build` into
# dist-dev/) is not in the build context at all.
FROM node:22-bookworm-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --ignore-scripts --no-audit --no-fund
COPY tsconfig.json ./
COPY src ./src
RUN npm run build:product

# --- prod-deps: production dependencies only ---------------------------------------------
FROM node:22-bookworm-slim AS prod-deps
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --ignore-scripts --no-audit --no-fund

# --- runtime -------------------------------------------------------------------------------
FROM gcr.io/distroless/nodejs22-debian12:nonroot
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
