// The standalone `crd-migrator` executable, as cmctl and flux ship one: nothing to install,
// not even Node.js. `npm run build:executable [-- --out DIR] [--base-url URL]`, after the
// product's build (the npm script runs it first):
// 1. esbuild bundles dist/cli/main.js and its dependencies into one ES module (the version
//    from package.json compiled in: no package.json travels with the executable);
// 2. Node's single executable applications (`node --build-sea`) append it to a copy of the
//    Node.js that runs this script, with main.ts's V8 flags;
// 3. a tar.gz of it (with LICENSE and README.md), its sha256, and a krew plugin manifest
//    for this platform from packaging/krew/crd-migrator.yaml.
// The executable is for the platform it is built on (one Node.js binary per platform):
// run the same command on each platform you publish.
import { execFileSync } from 'node:child_process'
import { createHash } from 'node:crypto'
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync, copyFileSync } from 'node:fs'
import { dirname, join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import { performance } from 'node:perf_hooks'
import { parseArgs } from 'node:util'
import { build } from 'esbuild'

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..')
const { values } = parseArgs({
  options: {
    out: { type: 'string', default: join(root, 'dist-exe') },
    'base-url': { type: 'string', default: 'https://RELEASES.example/crd-migrator/v{{VERSION}}' },
  },
})
const out = resolve(values.out)
const entry = join(root, 'dist/cli/main.js')
if (!existsSync(entry)) {
  console.error(`build-executable: ${entry} is missing; run npm run build:product first (npm run build:executable does)`)
  process.exit(2)
}
const { version } = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8'))
const os = { linux: 'linux', darwin: 'darwin', win32: 'windows' }[process.platform]
const arch = { x64: 'amd64', arm64: 'arm64' }[process.arch]
if (!os || !arch) {
  console.error(`build-executable: no krew platform for ${process.platform}/${process.arch}`)
  process.exit(2)
}
const exe = process.platform === 'win32' ? 'crd-migrator.exe' : 'crd-migrator'

rmSync(out, { recursive: true, force: true })
mkdirSync(join(out, 'work'), { recursive: true })

// 1. One module. Bundled CommonJS dependencies call require() for Node's built-ins; an ES
// module has none, so the banner makes one.
const bundle = join(out, 'work/crd-migrator.mjs')
const started = performance.now()
await build({
  entryPoints: [entry],
  outfile: bundle,
  bundle: true,
  platform: 'node',
  format: 'esm',
  target: `node${process.versions.node.split('.')[0]}`,
  define: { CRD_MIGRATOR_BUNDLED_VERSION: JSON.stringify(version) },
  banner: {
    js: "import { createRequire as __crdMigratorRequire } from 'node:module';\nconst require = __crdMigratorRequire(import.meta.url);",
  },
  legalComments: 'eof',
  logLevel: 'warning',
})

// 2. The flags main.ts's shebang gives node (a small young generation, slow heap growth:
// the memory a CLI run needs), so the executable behaves as `node dist/cli/main.js`.
const shebang = readFileSync(entry, 'utf8').split('\n', 1)[0] ?? ''
const execArgv = shebang.split(/\s+/).filter((word) => word.startsWith('--'))
const seaConfig = join(out, 'work/sea-config.json')
writeFileSync(
  seaConfig,
  JSON.stringify({ main: bundle, mainFormat: 'module', output: join(out, exe), disableExperimentalSEAWarning: true, execArgv }, null, 2),
)
execFileSync(process.execPath, ['--build-sea', seaConfig], { stdio: ['ignore', 'ignore', 'inherit'] })

// 3. What a release publishes: the archive, its checksum, and the krew manifest.
const archiveName = `crd-migrator_v${version}_${os}_${arch}.tar.gz`
for (const file of ['LICENSE', 'README.md']) if (existsSync(join(root, file))) copyFileSync(join(root, file), join(out, file))
const packed = [exe, ...['LICENSE', 'README.md'].filter((f) => existsSync(join(out, f)))]
execFileSync('tar', ['-czf', join(out, archiveName), '-C', out, ...packed])
const sha256 = createHash('sha256')
  .update(readFileSync(join(out, archiveName)))
  .digest('hex')
writeFileSync(join(out, `${archiveName}.sha256`), `${sha256}  ${archiveName}\n`)
const uri = `${values['base-url'].replaceAll('{{VERSION}}', version).replace(/\/$/, '')}/${archiveName}`
const manifest = readFileSync(join(root, 'packaging/krew/crd-migrator.yaml'), 'utf8')
  .replaceAll('{{VERSION}}', version)
  .replaceAll('{{OS}}', os)
  .replaceAll('{{ARCH}}', arch)
  .replaceAll('{{URI}}', uri)
  .replaceAll('{{SHA256}}', sha256)
  .replaceAll('{{BIN}}', exe)
writeFileSync(join(out, 'krew-crd-migrator.yaml'), manifest)
rmSync(join(out, 'work'), { recursive: true, force: true })

const mib = (file) => (readFileSync(file).length / 2 ** 20).toFixed(1)
console.log(
  `built ${join(out, exe)} (${mib(join(out, exe))} MiB, Node.js ${process.versions.node}, ${os}/${arch}) in ${((performance.now() - started) / 1000).toFixed(1)}s\n` +
    `  ${join(out, archiveName)} (${mib(join(out, archiveName))} MiB, sha256 ${sha256})\n` +
    `  ${join(out, 'krew-crd-migrator.yaml')} (uri ${uri}${values['base-url'].startsWith('https://RELEASES.example') ? '; pass --base-url to publish it' : ''})`,
)
