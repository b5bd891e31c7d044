/**
 * The Dockerfile's run-time stage, without Docker: in a scratch directory, build dist/ the
 * way the build stage does (`npm run build:product`: tsc over tsconfig.json + src/, the
 * development tooling in dev/ is not even there), install production dependencies only
 * the way the prod-deps stage does (`npm ci --omit=dev`, here offline from the local npm
 * cache), then run the built CLI from there: `--help`, every run-time module import, and
 * `serve` (webhook only) answering /readyz and stopping on SIGTERM.
 */
import { existsSync } from 'node:fs'
import { cp as copy, mkdtemp, readdir, readFile, rm, stat, symlink } from 'node:fs/promises'
import { createServer } from 'node:net'
import { tmpdir } from 'node:os'
import { join, relative } from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'
import t from 'tap'
import { generateDevCertificates } from '../../dev/certs/devcerts.js'
import { runProcess } from '../helpers/run-process.js'
import { spawnServe } from '../helpers/serve-process.js'

const repoRoot = fileURLToPath(new URL('../../', import.meta.url))

const run = (cmd: string, args: string[], cwd: string, env: NodeJS.ProcessEnv = process.env) => runProcess(cmd, args, { cwd, env })

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer()
    srv.once('error', reject)
    srv.listen(0, '127.0.0.1', () => {
      const port = (srv.address() as { port: number }).port
      srv.close(() => resolve(port))
    })
  })
}

async function jsFiles(dir: string): Promise<string[]> {
  const out: string[] = []
  for (const entry of await readdir(dir, { withFileTypes: true })) {
    const p = join(dir, entry.name)
    if (entry.isDirectory()) out.push(...(await jsFiles(p)))
    else if (entry.name.endsWith('.js')) out.push(p)
  }
  return out
}

/** The environment without tap's loader (NODE_OPTIONS): the built code must resolve on its own. */
const cleanEnv: NodeJS.ProcessEnv = { ...process.env, NODE_ENV: 'production' }
delete cleanEnv['NODE_OPTIONS']

const scratch = await mkdtemp(join(tmpdir(), 'crd-migrator-prod-'))
t.teardown(() => rm(scratch, { recursive: true, force: true }))
const app = join(scratch, 'app')

t.test('build stage: npm run build:product (tsc over tsconfig.json and src/)', async (t) => {
  // COPY package.json package-lock.json; npm ci (all dependencies: here the repository's
  // node_modules); COPY tsconfig.json src; npm run build:product.
  const build = join(scratch, 'build')
  await copy(join(repoRoot, 'src'), join(build, 'src'), { recursive: true })
  for (const f of ['package.json', 'package-lock.json', 'tsconfig.json']) await copy(join(repoRoot, f), join(build, f))
  await symlink(join(repoRoot, 'node_modules'), join(build, 'node_modules'), 'dir')
  const r = await run('npm', ['run', 'build:product', '--silent'], build, cleanEnv)
  t.equal(r.code, 0, 'npm run build:product succeeds', { output: r.stdout + r.stderr })
  // dist/ mirrors src/: the product, nothing of the tooling.
  const dirs = async (d: string) =>
    (await readdir(d, { withFileTypes: true }))
      .filter((e) => e.isDirectory())
      .map((e) => e.name)
      .sort()
  t.same(await dirs(join(build, 'dist')), await dirs(join(build, 'src')), "dist/ holds the product's folders only")
  // The run-time stage gets dist/ from here, and package.json (+ lock for npm ci).
  await copy(join(build, 'dist'), join(app, 'dist'), { recursive: true })
  for (const f of ['package.json', 'package-lock.json']) await copy(join(repoRoot, f), join(app, f))
  t.ok((await stat(join(app, 'dist', 'cli', 'main.js'))).isFile())
})

t.test('prod-deps stage: npm ci --omit=dev', async (t) => {
  const r = await run(
    'npm',
    ['ci', '--omit=dev', '--ignore-scripts', '--prefer-offline', '--no-audit', '--no-fund', '--loglevel=error'],
    app,
    cleanEnv,
  )
  t.equal(r.code, 0, 'npm ci --omit=dev succeeds', { output: r.stdout + r.stderr })
  // Packages the lock file marks dev-only must be absent (a dev dependency that a
  // production one also needs, like @types/node here, is not dev-only).
  const lock = JSON.parse(await readFile(join(app, 'package-lock.json'), 'utf8')) as { packages: Record<string, { dev?: boolean }> }
  const devOnly = Object.entries(lock.packages)
    .filter(([path, p]) => path && p.dev)
    .map(([path]) => path)
  t.ok(devOnly.includes('node_modules/typescript') && devOnly.includes('node_modules/tap'), 'typescript and tap are dev-only')
  const present: string[] = []
  for (const path of devOnly) if (existsSync(join(app, path))) present.push(path)
  t.same(present, [], `none of the ${devOnly.length} dev-only packages is installed`)
})

const env = { ...cleanEnv, KUBECONFIG: join(scratch, 'no-kubeconfig') }

t.test('the built CLI runs with production dependencies only', async (t) => {
  const help = await run(process.execPath, ['dist/cli/main.js', '--help'], app, env)
  t.equal(help.code, 0, 'crd-migrator --help', { stderr: help.stderr })
  t.match(help.stdout, /serve/)
  for (const command of ['serve', 'migrate', 'status', 'webhook-config'])
    t.match(help.stdout, new RegExp(`^\\s+${command}\\b`, 'm'), `the product has ${command}`)
  for (const command of ['cluster', 'demo', 'certs'])
    t.notMatch(help.stdout, new RegExp(`^\\s+${command}\\b`, 'm'), `${command} is development tooling (dev/main.ts), not a product command`)
  const serveHelp = await run(process.execPath, ['dist/cli/main.js', 'serve', '--help'], app, env)
  t.equal(serveHelp.code, 0, 'crd-migrator serve --help', { stderr: serveHelp.stderr })
  t.match(serveHelp.stdout, /--config/)

  // The image's org.opencontainers.image.version label (ARG VERSION's default) is the version it runs.
  const dockerfile = await readFile(join(repoRoot, 'Dockerfile'), 'utf8')
  const labelled = /^ARG VERSION=(\S+)$/m.exec(dockerfile)?.[1]
  const version = await run(process.execPath, ['dist/cli/main.js', '--version'], app, env)
  t.equal(version.code, 0, 'crd-migrator --version')
  t.equal(version.stdout.trim(), labelled, `the image's version label (${labelled}) is the version the CLI reports`)
  const completion = await run(process.execPath, ['dist/cli/main.js', 'completion', 'bash'], app, env)
  t.equal(completion.code, 0, 'crd-migrator completion bash', { stderr: completion.stderr })
  t.match(completion.stdout, /^complete -o default -F _crd_migrator crd-migrator$/m)
  t.match(completion.stdout, /"\$prog" __complete /, 'the script asks the program')
  const candidates = await run(process.execPath, ['dist/cli/main.js', '__complete', 'migrate', '--out'], app, env)
  t.match(candidates.stdout, /^--output\t.+\n:4\n$/, 'crd-migrator __complete', { stderr: candidates.stderr })
  // The executables of package.json's bin (kubectl_complete-crd_migrator among them) are in the image.
  const bins = (JSON.parse(await readFile(join(app, 'package.json'), 'utf8')) as { bin: Record<string, string> }).bin
  for (const [command, file] of Object.entries(bins)) t.ok(existsSync(join(app, file)), `${command}: ${file}`)
  const plugin = await run(process.execPath, [bins['kubectl_complete-crd_migrator']!, 'mig'], app, env)
  t.match(plugin.stdout, /^migrate\t.+\n:4\n$/, 'kubectl_complete-crd_migrator', { stderr: plugin.stderr })

  // Every run-time module resolves and loads (the executables would run: checked above).
  const executables = new Set(Object.values(bins).map((f) => join(app, f)))
  const files = (await jsFiles(join(app, 'dist'))).filter((f) => !executables.has(f))
  const script = `for (const f of ${JSON.stringify(files.map((f) => pathToFileURL(f).href))}) await import(f)`
  const imports = await run(process.execPath, ['--input-type=module', '-e', script], app, env)
  t.equal(imports.code, 0, `all ${files.length} modules of dist/ load`, { stderr: imports.stderr })
  t.ok(
    files.some((f) => relative(app, f) === join('dist', 'cli', 'serve', 'run-serve.js')),
    'serve (fastify, the webhook) among them',
  )
})

t.test('serve (webhook only) turns ready and stops on SIGTERM', async (t) => {
  const certs = await generateDevCertificates(join(scratch, 'certs'))
  const [webhookPort, metricsPort] = [await freePort(), await freePort()]
  const serve = spawnServe(
    t,
    [
      'dist/cli/main.js',
      'serve',
      '--no-migrator',
      '--no-leader-elect',
      '--tls-cert',
      certs.certFile,
      '--tls-key',
      certs.keyFile,
      '--webhook-host',
      '127.0.0.1',
      '--webhook-port',
      String(webhookPort),
      '--metrics-port',
      String(metricsPort),
    ],
    { cwd: app, env, metricsPort },
  )
  const { child, exited } = serve
  const ready = await serve.waitReady(100)
  t.ok(ready, 'GET /readyz on the metrics port answers 200', { output: serve.output() })
  const metrics = await fetch(`http://127.0.0.1:${metricsPort}/metrics`).then(
    (r) => r.text(),
    () => '',
  )
  t.match(metrics, /# TYPE /, '/metrics serves Prometheus text')
  child.kill('SIGTERM')
  const [code, signal] = await exited
  t.equal(code, 0, 'exits 0 on SIGTERM', { signal, output: serve.output() })
})
