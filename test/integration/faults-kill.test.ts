/**
 * kill -9 of `crd-migrator migrate` mid-phase, then the same command again (same owner
 * identity `cli:user@host`, so it resumes at once): the freeze and its checkpoint survive
 * the kill, every object up to the checkpoint is in the storage version in etcd and is not
 * written again, storedVersions keeps listing v1 until the second run has rewritten the
 * rest, and objects already rewritten beyond the checkpoint cost a no-op request only
 * (the API server writes nothing: their resourceVersion does not move).
 *
 * Runs the built CLI (dist/, built by CI before the tests; `npm run build` locally).
 */
import { spawn } from 'node:child_process'
import { existsSync, readdirSync, statSync } from 'node:fs'
import { join } from 'node:path'
import { performance } from 'node:perf_hooks'
import { fileURLToPath } from 'node:url'
import t from 'tap'
import { DEFAULT_MIGRATING_ANNOTATION } from '../../src/config/annotations.js'
import { StateAnnotation } from '../../src/state/crd-state.js'
import { getCrd } from '../../src/kube/crds.js'
import type { KubeHttp } from '../../src/kube/http.js'
import { collectionPath, type ResourceRef } from '../../src/kube/paths.js'
import type { PartialObjectMetadataList } from '../../src/kube/types.js'
import { httpFor, refFor } from '../helpers/cluster.js'
import { getControlPlane } from '../helpers/controlplane.js'
import { countVersions, etcdVersionsByKey, settledEtcdVersions } from '../helpers/faults.js'
import { crdWithObjects } from '../helpers/fixtures.js'
import { until } from '../helpers/until.js'

const root = fileURLToPath(new URL('../../', import.meta.url))
const cliJs = join(root, 'dist', 'cli', 'main.js')
// Without tap's NODE_OPTIONS (its process-info/coverage hook makes every start slower).
const cliEnv = Object.fromEntries(Object.entries(process.env).filter(([k]) => k !== 'NODE_OPTIONS' && !k.startsWith('_TAPJS_')))

/** The .ts files of src/ newer than their build output (the test runs the built CLI). */
function staleBuildOutputs(): string[] {
  const stale: string[] = []
  const walk = (dir: string) => {
    for (const entry of readdirSync(join(root, dir), { withFileTypes: true })) {
      const rel = join(dir, entry.name)
      if (entry.isDirectory()) walk(rel)
      else if (rel.endsWith('.ts')) {
        const js = join(root, 'dist', rel.slice('src/'.length).replace(/\.ts$/, '.js'))
        if (!existsSync(js) || statSync(js).mtimeMs < statSync(join(root, rel)).mtimeMs) stale.push(rel)
      }
    }
  }
  walk('src')
  return stale
}

async function resourceVersions(http: KubeHttp, ref: ResourceRef): Promise<Map<string, string>> {
  const list = (await http.request<PartialObjectMetadataList>({ method: 'GET', path: collectionPath(ref) })).body
  return new Map(list.items.map((i) => [`${i.metadata.namespace}/${i.metadata.name}`, i.metadata.resourceVersion!]))
}

t.test('kill -9 of `crd-migrator migrate` mid-phase; the next run resumes from the checkpoint', async (t) => {
  const stale = staleBuildOutputs().filter(
    (f) => f.startsWith('src/cli/') || f.startsWith('src/migrator/') || f.startsWith('src/kube/') || f.startsWith('src/config/'),
  )
  if (stale.length > 0) {
    t.fail(
      `dist/ is older than ${stale.slice(0, 3).join(', ')}${stale.length > 3 ? ` and ${stale.length - 3} more` : ''}: run \`npm run build\` (this test runs the built CLI)`,
    )
    return
  }
  const cp = await getControlPlane()
  const http = httpFor(cp.kubeconfigPath)
  const N = 1000
  const { group, crd, name } = await crdWithObjects(http, { prefix: 'kill', count: N, namespaces: 3 })
  const args = [
    cliJs,
    'migrate',
    name,
    '--kubeconfig',
    cp.kubeconfigPath,
    '--concurrency',
    '4',
    '--qps',
    '200',
    '--progress-interval-seconds',
    '0.5',
  ]

  // --- first run, killed once its progress annotation shows some hundreds done
  const t0 = performance.now()
  const first = spawn(process.execPath, args, { cwd: root, env: cliEnv, stdio: ['ignore', 'pipe', 'pipe'] })
  let firstOut = ''
  first.stdout.setEncoding('utf8').on('data', (d: string) => (firstOut += d))
  first.stderr.setEncoding('utf8').on('data', (d: string) => (firstOut += d))
  const exited = new Promise<NodeJS.Signals | number | null>((resolve) => first.on('exit', (code, signal) => resolve(signal ?? code)))
  const doneOf = (a: Record<string, string>) => Number((a[StateAnnotation.progress] ?? '0/').split('/')[0])
  const midPhase = (a: Record<string, string>) =>
    a[StateAnnotation.phase] === 'StorageVersionMigration' && doneOf(a) >= 300 && a[StateAnnotation.checkpoint] !== undefined
  // Until the run is mid-phase, or over (then the assertion on killedAt below fails).
  const seen = await until(
    'the first run to be 300 objects into its storage phase',
    60_000,
    async () => ({ exited: first.exitCode !== null, a: (await getCrd(http, name)).metadata.annotations ?? {} }),
    ({ exited, a }) => exited || midPhase(a),
  ).catch(() => undefined)
  let killedAt: { done: number; checkpoint: string } | undefined
  if (seen && midPhase(seen.a)) {
    first.kill('SIGKILL')
    killedAt = { done: doneOf(seen.a), checkpoint: seen.a[StateAnnotation.checkpoint]! }
  }
  const exit = await exited
  t.ok(killedAt, `killed mid-phase (progress ${killedAt?.done}/${N} at the kill; output so far: ${JSON.stringify(firstOut.slice(0, 300))})`)
  if (!killedAt) return
  t.equal(exit, 'SIGKILL', 'the first run died by SIGKILL')
  t.ok(killedAt.done < N, 'before the end of the phase')

  // --- between the runs: the freeze and its checkpoint stay; storedVersions still lists v1.
  // The writes the killed process had already sent land first (a fixed 300 ms was too
  // short on a busy machine: one landed after the etcd read, and the second run found it
  // current, not at v1).
  const etcdAtKill = await settledEtcdVersions(cp, group, 'widgets')
  const afterKill = await getCrd(http, name)
  const a = afterKill.metadata.annotations ?? {}
  t.equal(a[DEFAULT_MIGRATING_ANNOTATION], 'true', 'the CRD is still frozen')
  t.match(a[StateAnnotation.owner], /^cli:.+@.+/, 'by the CLI owner')
  t.equal(a[StateAnnotation.phase], 'StorageVersionMigration')
  const checkpoint = a[StateAnnotation.checkpoint]!
  t.ok(checkpoint >= killedAt.checkpoint, `with a checkpoint (${checkpoint})`)
  t.same(afterKill.status?.storedVersions, ['v1', 'v2'], 'storedVersions still lists v1')
  const atKill = countVersions(etcdAtKill)
  t.ok((atKill[`${group}/v1`] ?? 0) > 0 && (atKill[`${group}/v2`] ?? 0) > 0, `etcd holds a mix after the kill: ${JSON.stringify(atKill)}`)
  const upToCheckpoint = [...etcdAtKill.keys()].filter((k) => k <= checkpoint)
  t.ok(upToCheckpoint.length >= 300, `${upToCheckpoint.length} objects are at or before the checkpoint`)
  t.same(
    upToCheckpoint.filter((k) => etcdAtKill.get(k) !== `${group}/v2`),
    [],
    'every object up to the checkpoint is at v2 in etcd',
  )
  const rvAtKill = await resourceVersions(http, refFor(crd, 'v2'))
  const v2AtKill = [...etcdAtKill.entries()].filter(([, v]) => v === `${group}/v2`).map(([k]) => k)

  // --- second run: same owner, so it resumes at once
  const t1 = performance.now()
  const second = await new Promise<{ code: number | null; out: string }>((resolve, reject) => {
    const child = spawn(process.execPath, args, { cwd: root, env: cliEnv, stdio: ['ignore', 'pipe', 'pipe'] })
    let out = ''
    child.stdout.setEncoding('utf8').on('data', (d: string) => (out += d))
    child.stderr.setEncoding('utf8').on('data', (d: string) => (out += d))
    child.on('error', reject)
    child.on('exit', (code) => resolve({ code, out }))
  })
  const secondMs = performance.now() - t1
  t.equal(second.code, 0, 'the second run succeeds', { output: second.out })
  t.match(second.out, `${name}: Succeeded`)
  t.match(second.out, /WARN +resuming the freeze (of this identity|an earlier run of this identity) \(cli:[^)]+\)/, 'the second run says it resumes the killed run\'s freeze')
  t.match(second.out, /status\.storedVersions: \["v1","v2"\] -> \["v2"\]/)
  const m =
    /(\d+) listed, (\d+) rewritten, (\d+) already current, (\d+) written by others, (\d+) deleted, (\d+) failed, (\d+) done by an earlier run \(resumed after ([^)]+)\)/.exec(
      second.out,
    )
  t.ok(m, 'the summary counts objects done by the earlier run and names the checkpoint', { output: second.out })
  if (!m) return
  const [listed, rewritten, current, conflict, gone, failed, resumed] = m.slice(1, 8).map(Number) as [
    number,
    number,
    number,
    number,
    number,
    number,
    number,
  ]
  t.equal(m[8], checkpoint, 'resumed after the checkpoint left by the killed run')
  t.equal(listed, N, 'every object listed')
  t.equal(failed, 0)
  t.equal(resumed, upToCheckpoint.length, 'exactly the objects up to the checkpoint were skipped')
  t.equal(rewritten + current + conflict + gone, N - resumed, 'one request for each of the others, none for those')
  t.equal(rewritten, atKill[`${group}/v1`], 'the objects still at v1 were rewritten')
  t.equal(
    current,
    v2AtKill.length - upToCheckpoint.length,
    'the ones at v2 beyond the checkpoint (done after its last write) were no-op requests',
  )

  // Nothing already at v2 was written again: their resourceVersions did not move.
  const rvAtEnd = await resourceVersions(http, refFor(crd, 'v2'))
  const moved = v2AtKill.filter((k) => rvAtEnd.get(k) !== rvAtKill.get(k))
  t.same(moved, [], `none of the ${v2AtKill.length} objects already at v2 at the kill was written again`)

  const end = await getCrd(http, name)
  t.same(end.status?.storedVersions, ['v2'], 'storedVersions is [v2] at the end')
  t.notOk(DEFAULT_MIGRATING_ANNOTATION in (end.metadata.annotations ?? {}), 'the freeze is lifted')
  t.equal(end.metadata.annotations?.[StateAnnotation.lastResult], 'Succeeded')
  t.same(countVersions(await etcdVersionsByKey(cp, group, 'widgets')), { [`${group}/v2`]: N }, 'etcd holds every object at v2')
  t.comment(
    `kill -9: ${N} objects; killed after ${killedAt.done} (${((t1 - t0) / 1000).toFixed(1)} s in), checkpoint covered ${upToCheckpoint.length}, ${v2AtKill.length} at v2 at the kill; resumed run ${(secondMs / 1000).toFixed(1)} s: ${resumed} skipped, ${rewritten} rewritten, ${current} no-op, ${conflict} conflict`,
  )
})
