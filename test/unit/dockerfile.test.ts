/**
 * What can be checked of the Dockerfile without a Docker engine: the files it copies exist
 * and pass .dockerignore, files copied from a build stage are made there, the base images
 * are a supported Node.js LTS, the run-time stage has production dependencies only, runs as
 * a non-root user with no shell, and its entry point is the package's `crd-migrator` bin
 * with `serve`. test/integration/dockerfile-prod.test.ts runs the production install.
 */
import { existsSync, readFileSync } from 'node:fs'
import { join, posix } from 'node:path'
import { fileURLToPath } from 'node:url'
import t from 'tap'
import { parse } from 'yaml'
import { nodeFlagsOfShebang } from '../../dev/bench/product-flags.js'

const repoRoot = fileURLToPath(new URL('../../', import.meta.url))
const read = (p: string) => readFileSync(join(repoRoot, p), 'utf8')

/** The project's one Node.js LTS line: the major of .node-version, which .ci/run and scripts/node.sh install. */
const NODE_MAJOR = Number(read('.node-version').trim().replace(/^v/, '').split('.')[0])
/** Debian release of an official node image variant (the distroless run time names its own: -debianN). */
const DEBIAN_OF_VARIANT: Record<string, number> = { bookworm: 12, trixie: 13 }

interface Instruction {
  op: string
  args: string
  line: number
}

interface Stage {
  index: number
  image: string
  name: string | undefined
  instructions: Instruction[]
}

/** Dockerfile instructions, continuation lines joined, comments and parser directives dropped. */
export function parseDockerfile(text: string): Stage[] {
  const stages: Stage[] = []
  const lines = text.split('\n')
  for (let i = 0; i < lines.length; i++) {
    const start = i + 1
    let line = lines[i]!
    if (/^\s*(#|$)/.test(line)) continue
    while (/\\\s*$/.test(line) && i + 1 < lines.length) {
      line = line.replace(/\\\s*$/, ' ')
      const next = lines[++i]!
      if (!/^\s*#/.test(next)) line += next
    }
    const m = /^\s*(\w+)\s+(.*)$/.exec(line)
    if (!m) throw new Error(`Dockerfile line ${start}: cannot parse ${JSON.stringify(line)}`)
    const op = m[1]!.toUpperCase()
    const args = m[2]!.trim()
    if (op === 'FROM') {
      const from = /^(?:--platform=\S+\s+)?(\S+)(?:\s+AS\s+(\S+))?$/i.exec(args)
      if (!from) throw new Error(`Dockerfile line ${start}: cannot parse FROM ${args}`)
      stages.push({ index: stages.length, image: from[1]!, name: from[2], instructions: [] })
      continue
    }
    const stage = stages.at(-1)
    if (!stage) throw new Error(`Dockerfile line ${start}: ${op} before FROM`)
    stage.instructions.push({ op, args, line: start })
  }
  return stages
}

/** COPY flags and sources/destination (shell form; JSON form too). */
function parseCopy(args: string): { from: string | undefined; sources: string[]; dest: string } {
  const words = args.startsWith('[') ? (JSON.parse(args) as string[]) : args.split(/\s+/)
  let from: string | undefined
  const rest: string[] = []
  for (const w of words) {
    if (w.startsWith('--from=')) from = w.slice('--from='.length)
    else if (w.startsWith('--'))
      continue // --chown, --chmod, --link
    else rest.push(w)
  }
  return { from, sources: rest.slice(0, -1), dest: rest.at(-1)! }
}

/** The last WORKDIR set in a stage before instruction `before`, or '/'. */
function workdirAt(stage: Stage, before: number): string {
  let dir = '/'
  for (const ins of stage.instructions) {
    if (ins.line >= before) break
    if (ins.op === 'WORKDIR') dir = posix.resolve(dir, ins.args)
  }
  return dir
}

function globToRegExp(glob: string): RegExp {
  let re = ''
  for (let i = 0; i < glob.length; i++) {
    const c = glob[i]!
    if (c === '*' && glob[i + 1] === '*') {
      re += '.*'
      i++
    } else if (c === '*') re += '[^/]*'
    else if (c === '?') re += '[^/]'
    else re += c.replace(/[.+^${}()|[\]\\]/g, '\\$&')
  }
  return new RegExp(`^${re}$`)
}

/**
 * Whether .dockerignore excludes a context path (Docker's rules: patterns in order, the
 * last match wins, `!` re-includes, a pattern matching a parent directory matches the path).
 */
export function dockerIgnored(patterns: string[], path: string): boolean {
  const parts = path.split('/')
  const prefixes = parts.map((_, i) => parts.slice(0, i + 1).join('/'))
  let excluded = false
  for (const raw of patterns) {
    const negate = raw.startsWith('!')
    const pattern = posix.normalize((negate ? raw.slice(1) : raw).trim()).replace(/^\/+|\/+$/g, '')
    const re = globToRegExp(pattern)
    if (prefixes.some((p) => re.test(p))) excluded = !negate
  }
  return excluded
}

const stages = parseDockerfile(read('Dockerfile'))
const runtime = stages.at(-1)!
const ignore = read('.dockerignore')
  .split('\n')
  .map((l) => l.trim())
  .filter((l) => l && !l.startsWith('#'))
const pkg = JSON.parse(read('package.json')) as {
  name: string
  version: string
  description: string
  license: string
  bin: Record<string, string>
  engines: { node: string }
  scripts: Record<string, string>
  files: string[]
}
const tsconfig = JSON.parse(read('tsconfig.json')) as { compilerOptions: { outDir: string; rootDir: string }; include: string[] }

/** The npm scripts a RUN line calls (`npm run <name>`). */
const npmScriptsOf = (run: string) => [...run.matchAll(/\bnpm run ([\w:-]+)/g)].map((m) => m[1]!)
/** The product build: tsc over tsconfig.json alone (src/ -> dist/), not the tooling in dev/. */
const PRODUCT_BUILD = /^tsc -p tsconfig\.json$/

t.test('parser and .dockerignore matcher', async (t) => {
  const s = parseDockerfile('# c\nFROM a:1 AS one\nRUN x \\\n  y\nFROM b\nCOPY --from=one /x ./y\n')
  t.same(
    s.map((x) => [x.image, x.name, x.instructions.map((i) => i.op)]),
    [
      ['a:1', 'one', ['RUN']],
      ['b', undefined, ['COPY']],
    ],
  )
  t.match(s[0]!.instructions[0]!.args, /^x\s+y$/)
  t.ok(dockerIgnored(['*', '!src'], 'certs/tls.key'))
  t.notOk(dockerIgnored(['*', '!src'], 'src/cli/main.ts'))
  t.ok(dockerIgnored(['node_modules'], 'node_modules/x/index.js'))
  t.notOk(dockerIgnored(['*.md', '!README.md'], 'README.md'))
})

t.test('base images are the project Node.js LTS on one Debian release; the run time is distroless and non-root', async (t) => {
  t.ok(stages.length >= 2, 'multi-stage')
  t.ok(NODE_MAJOR >= 26 && NODE_MAJOR % 2 === 0, `.node-version is on an LTS line (${NODE_MAJOR})`)
  const debians = new Set<number>()
  for (const stage of stages) {
    const node = /^(?:docker\.io\/(?:library\/)?)?node:(\d+)(?:-([a-z]+)(?:-slim)?)?(?:@sha256:[0-9a-f]{64})?$/.exec(stage.image)
    const distroless = /^gcr\.io\/distroless\/nodejs(\d+)-debian(\d+)(?::[\w.-]+)?(?:@sha256:[0-9a-f]{64})?$/.exec(stage.image)
    t.ok(node || distroless, `${stage.image}: an official node image or distroless nodejs`)
    const major = Number((node ?? distroless)?.[1])
    t.equal(major, NODE_MAJOR, `${stage.image}: Node.js ${NODE_MAJOR}, as .node-version`)
    const debian = node ? DEBIAN_OF_VARIANT[node[2] ?? ''] : Number(distroless?.[2])
    t.ok(debian, `${stage.image}: names its Debian release (${Object.keys(DEBIAN_OF_VARIANT).join(' or ')} for node images)`)
    if (debian) debians.add(debian)
  }
  t.equal(debians.size, 1, `build and run time on one Debian release (${[...debians].join(', ')})`)
  t.equal(pkg.engines.node, `>=${NODE_MAJOR}`, 'package.json engines name the same major')

  t.match(runtime.image, /^gcr\.io\/distroless\/nodejs\d+-debian\d+:nonroot@sha256:[0-9a-f]{64}$/, 'run time: distroless, nonroot variant')
  const users = runtime.instructions.filter((i) => i.op === 'USER')
  const user = users.at(-1)?.args ?? (runtime.image.includes(':nonroot') ? 'nonroot' : 'root')
  const uid = user.split(':')[0]!
  t.notOk(['root', '0'].includes(uid), `runs as ${user}, not root`)
  t.notOk(
    runtime.instructions.some((i) => i.op === 'RUN'),
    'no RUN in the run-time stage (distroless has no shell)',
  )

  // The chart runs the pod as the image's user; keep the two in step.
  const values = parse(read('charts/crd-migrator/values.yaml')) as { podSecurityContext: { runAsUser: number; runAsGroup: number } }
  t.equal(user, `${values.podSecurityContext.runAsUser}:${values.podSecurityContext.runAsGroup}`, 'the Helm chart runs the same uid:gid')
})

t.test('every base image is pinned by digest, beside the tag it was taken from', async (t) => {
  for (const stage of stages) {
    t.match(stage.image, /^[\w./-]+:[\w.-]+@sha256:[0-9a-f]{64}$/, `${stage.name ?? 'run time'}: ${stage.image}`)
  }
  const digestsOf = (repo: string) => new Set(stages.filter((s) => s.image.startsWith(`${repo}:`)).map((s) => s.image))
  t.equal(digestsOf('node').size, 1, 'the build stages start from the same node image')
})

/** LABEL key="value" pairs of a stage (continuation lines already joined by the parser). */
function labelsOf(stage: Stage): Record<string, string> {
  const labels: Record<string, string> = {}
  for (const ins of stage.instructions.filter((i) => i.op === 'LABEL')) {
    for (const m of ins.args.matchAll(/([\w.-]+)="((?:[^"\\]|\\.)*)"/g)) labels[m[1]!] = m[2]!
  }
  return labels
}

/** ARG name=default of a stage; undefined default for a bare ARG. */
function argsOf(stage: Stage): Record<string, string | undefined> {
  const args: Record<string, string | undefined> = {}
  for (const ins of stage.instructions.filter((i) => i.op === 'ARG')) {
    const [name, ...value] = ins.args.split('=')
    args[name!] = value.length > 0 ? value.join('=').replace(/^"(.*)"$/, '$1') : undefined
  }
  return args
}

t.test('the image carries the OCI labels, from package.json and the build arguments', async (t) => {
  const labels = labelsOf(runtime)
  const prefix = 'org.opencontainers.image.'
  t.same(
    Object.keys(labels)
      .filter((k) => k.startsWith(prefix))
      .sort(),
    ['description', 'licenses', 'revision', 'source', 'title', 'version'].map((k) => prefix + k),
    'title, description, licenses, version, revision, source',
  )
  t.equal(labels[`${prefix}title`], pkg.name, 'title: the package name')
  t.equal(labels[`${prefix}description`], pkg.description, "description: package.json's")
  t.equal(labels[`${prefix}licenses`], pkg.license, "licenses: package.json's SPDX expression")
  const args = argsOf(runtime)
  t.equal(labels[`${prefix}version`], '${VERSION}', 'version from the VERSION build argument')
  t.equal(args.VERSION, pkg.version, "VERSION defaults to package.json's version")
  t.equal(labels[`${prefix}revision`], '${REVISION}', 'revision from the REVISION build argument (git rev-parse HEAD)')
  t.equal(labels[`${prefix}source`], '${SOURCE}', 'source from the SOURCE build argument (the repository URL)')
  t.ok('REVISION' in args && 'SOURCE' in args, 'both declared in the run-time stage')
})

t.test('every COPY source exists: in the build context (and not .dockerignored) or made by an earlier stage', async (t) => {
  const byName = new Map(stages.filter((s) => s.name).map((s) => [s.name!, s]))
  let copies = 0
  for (const stage of stages) {
    for (const ins of stage.instructions.filter((i) => i.op === 'COPY' || i.op === 'ADD')) {
      t.equal(ins.op, 'COPY', `line ${ins.line}: COPY, not ADD`)
      const { from, sources } = parseCopy(ins.args)
      for (const src of sources) {
        copies++
        if (from === undefined) {
          t.ok(existsSync(join(repoRoot, src)), `line ${ins.line}: ${src} exists in the repository`)
          t.notOk(
            dockerIgnored(ignore, posix.normalize(src).replace(/\/$/, '')),
            `line ${ins.line}: ${src} is in the build context (.dockerignore)`,
          )
          continue
        }
        const source = byName.get(from)
        t.ok(source && source.index < stage.index, `line ${ins.line}: stage ${from} is defined earlier`)
        if (!source) continue
        const workdir = workdirAt(source, Infinity)
        const runs = source.instructions.filter((i) => i.op === 'RUN').map((i) => i.args)
        if (src === posix.join(workdir, 'node_modules')) {
          t.ok(
            runs.some((r) => /\bnpm ci\b/.test(r)),
            `line ${ins.line}: stage ${from} installs node_modules with npm ci`,
          )
          if (stage === runtime)
            t.ok(
              runs.some((r) => /\bnpm ci\b.*--omit=dev/.test(r)),
              `line ${ins.line}: the run time gets production dependencies only`,
            )
        } else if (src === posix.join(workdir, tsconfig.compilerOptions.outDir)) {
          const scripts = runs.flatMap(npmScriptsOf)
          t.ok(
            scripts.some((name) => PRODUCT_BUILD.test(pkg.scripts[name] ?? '')),
            `line ${ins.line}: stage ${from} builds ${tsconfig.compilerOptions.outDir}/ with an npm script that runs \`tsc -p tsconfig.json\` (${scripts.join(', ')})`,
          )
          const copied = source.instructions.filter((i) => i.op === 'COPY').flatMap((i) => parseCopy(i.args).sources)
          t.ok(
            copied.includes('tsconfig.json') && copied.some((c) => c.replace(/\/$/, '') === tsconfig.compilerOptions.rootDir),
            `stage ${from} has tsconfig.json and ${tsconfig.compilerOptions.rootDir}/`,
          )
        } else {
          t.fail(`line ${ins.line}: do not know how stage ${from} makes ${src}`)
        }
      }
    }
  }
  t.ok(copies > 0)
  // Things that must never reach the build context.
  for (const p of [
    'certs/tls.key',
    'certs/ca.key',
    '.git/config',
    'node_modules/tap/package.json',
    'dist/cli/main.js',
    'charts/crd-migrator/values.yaml',
  ]) {
    t.ok(dockerIgnored(ignore, p), `${p} stays out of the build context`)
  }
})

t.test('the entry point is the built crd-migrator CLI, running `serve`', async (t) => {
  const entrypoint = runtime.instructions.filter((i) => i.op === 'ENTRYPOINT').at(-1)
  const cmd = runtime.instructions.filter((i) => i.op === 'CMD').at(-1)
  t.ok(entrypoint && entrypoint.args.startsWith('['), 'ENTRYPOINT in exec form (no shell)')
  t.ok(cmd && cmd.args.startsWith('['), 'CMD in exec form')
  const [node, script, ...extra] = JSON.parse(entrypoint!.args) as string[]
  t.equal(node, '/nodejs/bin/node', 'distroless node')
  // No node flags: `serve` keeps V8's default young generation. The executable's shebang
  // caps it for the CLI (migrate), but the webhook parses reviews of up to 3 MiB, and with
  // 2 MB semi-spaces a 1 MB CRD's review took 4x the floor's p99 (docs/commands.md and docs/performance.md).
  t.same(extra, [])
  t.notOk(script!.startsWith('-'), 'no node flags before the script')
  t.ok(nodeFlagsOfShebang(read('src/cli/main.ts')).length > 0, 'while the CLI executable sets its own')
  t.equal(script, pkg.bin['crd-migrator'], 'the package.json bin target')
  const workdir = workdirAt(runtime, Infinity)
  const copiedTo = runtime.instructions.filter((i) => i.op === 'COPY').map((i) => posix.resolve(workdir, parseCopy(i.args).dest))
  t.ok(copiedTo.includes(posix.join(workdir, tsconfig.compilerOptions.outDir)), `${tsconfig.compilerOptions.outDir}/ lands in ${workdir}`)
  t.ok(copiedTo.includes(posix.join(workdir, 'node_modules')), `node_modules/ lands in ${workdir}`)
  t.ok(copiedTo.includes(workdir), 'package.json ("type": "module") lands next to them')
  // dist/cli/main.js is compiled from src/cli/main.ts (rootDir src, outDir dist).
  const source = script!
    .replace(new RegExp(`^${tsconfig.compilerOptions.outDir}/`), `${tsconfig.compilerOptions.rootDir}/`)
    .replace(/\.js$/, '.ts')
  t.ok(existsSync(join(repoRoot, source)), `${script} is built from ${source}`)
  const args = JSON.parse(cmd!.args) as string[]
  t.same(args, ['serve'])
  t.match(read(source), /buildProgram\(/, 'the executable runs the program of src/cli/program.ts')
  t.match(read('src/cli/program.ts'), /registerServe\(program\)/, 'which registers the serve command')
  t.match(read('src/cli/serve/serve.ts'), /\.command\('serve'\)/, 'the CLI has a serve command')
  const exposed = runtime.instructions
    .filter((i) => i.op === 'EXPOSE')
    .flatMap((i) => i.args.split(/\s+/))
    .map(Number)
  t.same(exposed.sort(), [8080, 9443], 'EXPOSE the default webhook (9443) and metrics (8080) ports')
})

t.test('the image gets the product build only, never the development tooling', async (t) => {
  // tsconfig.json compiles src/ alone into dist/; dev/tsconfig.json the tooling into dist-dev/.
  t.same(tsconfig.include, [`${tsconfig.compilerOptions.rootDir}/**/*.ts`], 'the product tsconfig compiles src/ only')
  t.match(pkg.scripts['build:product'], PRODUCT_BUILD, 'npm run build:product is the product alone')
  t.match(pkg.scripts['build'], /tsc -p tsconfig\.json && tsc -p dev\/tsconfig\.json/, 'npm run build makes both')
  const devTsconfig = read('dev/tsconfig.json')
  t.match(devTsconfig, /"outDir": "\.\.\/dist-dev"/, 'the tooling builds into dist-dev/')
  for (const p of ['dev/main.ts', 'dev/controlplane/controlplane.ts', 'dist-dev/dev/main.js', 'scripts/test.mjs']) {
    t.ok(dockerIgnored(ignore, p), `${p} stays out of the build context`)
  }
  const build = stages.find((s) => s.name === 'build')!
  t.notOk(
    build.instructions.some((i) => i.op === 'RUN' && /\brm\b/.test(i.args)),
    'nothing is built only to be deleted',
  )
  const fromBuild = runtime.instructions
    .filter((i) => i.op === 'COPY' && parseCopy(i.args).from === 'build')
    .flatMap((i) => parseCopy(i.args).sources)
  t.same(
    fromBuild,
    [posix.join(workdirAt(build, Infinity), tsconfig.compilerOptions.outDir)],
    `the run time copies ${tsconfig.compilerOptions.outDir}/ and nothing else from the build`,
  )
  t.same(
    pkg.files,
    [tsconfig.compilerOptions.outDir],
    `the npm package ships ${tsconfig.compilerOptions.outDir}/ (plus package.json and README)`,
  )
})
