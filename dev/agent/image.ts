/**
 * Images the node agent can run, without a container runtime or a registry: an image is
 * mapped to files of this machine that stand for its contents, and to the settings of its
 * Dockerfile. One image is known, the project's own (the Helm chart's `image.repository`,
 * charts/crd-migrator/values.yaml, `crd-migrator`), built by ./Dockerfile:
 *
 * | Dockerfile (runtime stage)                         | node agent                                                                 |
 * | -------------------------------------------------- | -------------------------------------------------------------------------- |
 * | FROM gcr.io/distroless/nodejs26-debian13:nonroot   | the host's /usr, /etc (and the /bin, /lib... symlinks or dirs), each as an |
 * |   (glibc, CA certificates, /nodejs/bin/node)       | overlay whose writes stay in the pod (a container's writable layer)       |
 * | /nodejs (distroless' Node.js 26)                   | the project's Node: the install holding process.execPath (scripts/node.sh) |
 * | COPY --from=build /app/dist ./dist                 | <repo>/dist (npm run build), read-only at /app/dist                        |
 * | COPY --from=prod-deps /app/node_modules            | <repo>/node_modules, read-only at /app/node_modules (dev deps too)         |
 * | COPY package.json ./                               | <repo>/package.json, read-only at /app/package.json                        |
 * | WORKDIR /app                                       | workingDir /app unless the container sets one                              |
 * | ENV NODE_ENV=production (+ distroless PATH, HOME)  | those variables first, the container's env over them                       |
 * | USER 65532:65532                                   | runAsUser/runAsGroup 65532 unless the securityContext sets them            |
 * | ENTRYPOINT ["/nodejs/bin/node", "dist/cli/main.js"] | the container's `command` when set, else this                             |
 * | CMD ["serve"]                                      | the container's `args` when set (or `command` is set), else this           |
 *
 * Any tag or digest of a repository whose last path segment is `crd-migrator`
 * (`crd-migrator:0.1.0`, `ghcr.io/acme/crd-migrator@sha256:...`) is this image: the agent
 * runs what is built now, not what a tag was built from. Other images are refused:
 * {@link resolveImage} throws {@link UnsupportedImageError}, and the pod says why
 * (ErrImagePull with that message).
 */
import { existsSync } from 'node:fs'
import { dirname, join } from 'node:path'
import { packageRoot } from '../controlplane/binaries.js'

/** A host path shown at `target` inside the container, read-only. */
export interface ImageLayer {
  source: string
  target: string
}

export interface ImageSpec {
  /** The name the image goes by in the pod status (`image`), and `imageID`. */
  imageID: string
  entrypoint: string[]
  cmd: string[]
  workingDir: string
  env: Record<string, string>
  user: { uid: number; gid: number }
  /** Image contents at their paths (the base system comes from the host: see the table above). */
  layers: ImageLayer[]
}

export class UnsupportedImageError extends Error {
  override readonly name = 'UnsupportedImageError'
  constructor(readonly image: string) {
    super(
      `image ${JSON.stringify(image)} is not one the node agent can run: it runs the project's own image only ` +
        "(repository crd-migrator, any tag or registry: the repository's dist/ on the project's Node, see dev/agent/image.ts)",
    )
  }
}

/** Repository of an image reference, without registry, tag or digest: `ghcr.io/a/crd-migrator:1@sha256:x` -> `crd-migrator`. */
export function imageRepositoryName(image: string): string {
  const noDigest = image.split('@')[0] ?? ''
  const last = noDigest.split('/').at(-1) ?? ''
  return last.split(':')[0] ?? ''
}

export interface ImageSources {
  /** The repository root holding dist/, node_modules/ and package.json; default the package root. */
  repoRoot?: string
  /** The Node.js binary; default process.execPath (its install prefix becomes /nodejs). */
  nodeBinary?: string
}

/** The image `image` as the agent runs it, or {@link UnsupportedImageError}. */
export function resolveImage(image: string, sources: ImageSources = {}): ImageSpec {
  if (imageRepositoryName(image) !== 'crd-migrator') throw new UnsupportedImageError(image)
  const root = sources.repoRoot ?? packageRoot()
  const node = sources.nodeBinary ?? process.execPath
  const main = join(root, 'dist', 'cli', 'main.js')
  if (!existsSync(main)) {
    throw new Error(`image ${image}: ${main} does not exist; build the image contents first (npm run build)`)
  }
  if (!node.endsWith('/bin/node')) throw new Error(`image ${image}: ${node} is not <prefix>/bin/node, cannot mount it as /nodejs`)
  return {
    imageID: `crd-migrator-agent://${root}/dist`,
    entrypoint: ['/nodejs/bin/node', 'dist/cli/main.js'],
    cmd: ['serve'],
    workingDir: '/app',
    env: {
      PATH: '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin',
      HOME: '/home/nonroot',
      NODE_ENV: 'production',
    },
    user: { uid: 65532, gid: 65532 },
    layers: [
      { source: dirname(dirname(node)), target: '/nodejs' },
      { source: join(root, 'dist'), target: '/app/dist' },
      { source: join(root, 'node_modules'), target: '/app/node_modules' },
      { source: join(root, 'package.json'), target: '/app/package.json' },
    ],
  }
}

/** What runs: Kubernetes' rules for command/args over ENTRYPOINT/CMD. */
export function commandLine(image: ImageSpec, command: string[] | undefined, args: string[] | undefined): string[] {
  if (command && command.length > 0) return [...command, ...(args ?? [])]
  return [...image.entrypoint, ...(args && args.length > 0 ? args : image.cmd)]
}
