/**
 * What the migrator's process loads before its first request: `migrate` and the controller
 * never use undici (Node's fetch and WebSocket), and an ES module import of node:http would
 * load it anyway through the namespace's lazy getters (~16 MB resident, src/kube/node-http.ts).
 */
import { spawnSync } from 'node:child_process'
import { fileURLToPath, pathToFileURL } from 'node:url'
import t from 'tap'

const root = fileURLToPath(new URL('../../', import.meta.url))

/** Node's internal modules a fresh process has loaded after importing `modules` (through tap's TypeScript loader). */
function internalModulesAfterImporting(modules: string[]): string[] {
  const script = [
    ...modules.map((m) => `await import(${JSON.stringify(pathToFileURL(root + m).href)})`),
    'process.stdout.write(JSON.stringify(process.moduleLoadList))',
  ].join('\n')
  const child = spawnSync(process.execPath, [...process.execArgv, '--input-type=module', '--eval', script], { cwd: root, encoding: 'utf8' })
  if (child.status !== 0) throw new Error(`the child failed (${child.status}): ${child.stderr}`)
  return JSON.parse(child.stdout) as string[]
}

t.test('migrate, serve and the kube transport do not load undici', async (t) => {
  const loaded = internalModulesAfterImporting([
    'src/cli/migrate/run-migrate.ts',
    'src/cli/serve/run-serve.ts',
    'src/kube/client.ts',
    'src/controller/controller.ts',
  ])
  t.ok(loaded.includes('NativeModule http'), 'node:http is loaded (the list is the real one)')
  t.same(
    loaded.filter((m) => m.includes('undici')),
    [],
    'no undici',
  )
})

t.test('an ES module import of node:http does load undici (the reason for src/kube/node-http.ts)', async (t) => {
  const loaded = internalModulesAfterImporting([])
  t.notOk(
    loaded.some((m) => m.includes('undici')),
    'not in a bare process',
  )
  const child = spawnSync(
    process.execPath,
    ['--input-type=module', '--eval', "await import('node:http'); process.stdout.write(JSON.stringify(process.moduleLoadList))"],
    { encoding: 'utf8' },
  )
  t.ok(
    (JSON.parse(child.stdout) as string[]).some((m) => m.includes('undici')),
    'loaded after import("node:http")',
  )
})
