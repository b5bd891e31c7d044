/**
 * `status` for a fleet (issue #29 item 4, issue #30 item 7), against the real API server:
 * the summary (counts by state, in flight, queued, the ETA of the running CRDs from their
 * progress annotations); what it reads (named CRDs by GET and nothing else; without
 * names, the labelled CRDs in a label-selected list and the others from a metadata-only
 * list, never every full CRD); and `status -w`, which prints each change as it comes.
 */
import t from 'tap'
import { pino } from 'pino'
import { showStatus, type StatusRow } from '../../src/cli/status/run-status.js'
import type { StatusSummary } from '../../src/cli/status/status-summary.js'
import { ConfigSchema } from '../../src/config/schema.js'
import { getCrd, patchCrdAnnotations } from '../../src/kube/crds.js'
import { Accept, KubeHttp, type KubeRequest, type KubeResponse } from '../../src/kube/http.js'
import { crdPath, CRD_API } from '../../src/kube/paths.js'
import type { CustomResourceDefinition } from '../../src/kube/types.js'
import { migrateCrd } from '../../src/migrator/migrate.js'
import { StateAnnotation } from '../../src/state/crd-state.js'
import { KubeConfig } from '@kubernetes/client-node'
import { createCrd, crdManifest, defaultSettings, httpFor } from '../helpers/cluster.js'
import { getControlPlane, uniqueGroup, uniqueName } from '../helpers/controlplane.js'
import { crashedFreeze, crdWithObjects } from '../helpers/fixtures.js'
import { until } from '../helpers/until.js'
import { collector } from '../helpers/collector.js'

const logger = pino({ level: 'silent' })

/** Every request `status` sends, and the names of the full CRDs it received (list items, GETs, watch events). */
class RecordingHttp extends KubeHttp {
  readonly requests: Array<{ path: string; accept: string | undefined; query: KubeRequest['query'] }> = []
  readonly fullCrds: string[] = []

  override async request<T = unknown>(req: KubeRequest): Promise<KubeResponse<T>> {
    this.requests.push({ path: req.path, accept: req.accept, query: req.query })
    const res = await super.request<T>(req)
    const body = res.body as { kind?: string; items?: CustomResourceDefinition[]; metadata?: { name?: string } }
    if (body.kind === 'CustomResourceDefinition') this.fullCrds.push(body.metadata!.name!)
    if (body.kind === 'CustomResourceDefinitionList') for (const c of body.items ?? []) this.fullCrds.push(c.metadata.name)
    return res
  }

  override async stream(req: Omit<KubeRequest, 'body'>, onEvent: (event: unknown) => void): Promise<void> {
    this.requests.push({ path: req.path, accept: req.accept, query: req.query })
    return super.stream(req, (raw) => {
      const event = raw as { type: string; object: CustomResourceDefinition }
      if (event.type !== 'BOOKMARK' && event.object.kind === 'CustomResourceDefinition') this.fullCrds.push(event.object.metadata.name)
      onEvent(raw)
    })
  }
}

/** `-w -o json`'s output: one JSON document per line. */
const jsonLines = <T>(text: string): T[] =>
  text
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l) as T)

function recording(kubeconfigPath: string): RecordingHttp {
  const kc = new KubeConfig()
  kc.loadFromFile(kubeconfigPath)
  const http = new RecordingHttp(kc)
  t.teardown(() => http.close())
  return http
}

t.test('status of a fleet: the summary, only the reads it needs, -w', async (t) => {
  const cp = await getControlPlane()
  const http = httpFor(cp.kubeconfigPath)
  const label = { 'crd-migrator-test/status': uniqueName('fleet') }
  const labelSelector = Object.entries(label).map(([k, v]) => `${k}=${v}`)[0]!
  const make = () => crdWithObjects(http, { prefix: 'status', count: 5, labels: label })
  const [migrated, pending, running, failed] = [await make(), await make(), await make(), await make()]
  const settings = defaultSettings()
  t.equal((await migrateCrd(migrated.name, settings, { http, logger, owner: 'status-test' })).outcome, 'Succeeded')
  // A run of another replica in its storage phase: 50 of 200 after 3,700 s.
  await patchCrdAnnotations(http, running.name, crashedFreeze(running.crd, { extra: { [StateAnnotation.progress]: '50/200' } }))
  await patchCrdAnnotations(http, failed.name, { [StateAnnotation.lastResult]: 'Failed: 3 object(s) could not be rewritten' })
  // Neither selected nor carrying our state: never shown, never read in full.
  const unrelated = (await createCrd(http, crdManifest({ group: uniqueGroup('status'), versions: ['v1'], storage: 'v1' }))).metadata.name
  const fleet = [migrated.name, pending.name, running.name, failed.name]
  // The crashed run's heartbeat is an hour old: alive for a takeover time of two hours, stale for the default.
  const config = ConfigSchema.parse({
    kubeconfig: cp.kubeconfigPath,
    migrator: { selector: { labelSelector }, takeoverAfterSeconds: 7200 },
  })

  t.test('named CRDs: GET each, nothing listed; the summary counts them', async (t) => {
    const rec = recording(cp.kubeconfigPath)
    const out = collector()
    t.equal(await showStatus(rec, config, out.stream, { format: 'json', names: fleet, summary: true }), 0)
    const summary = JSON.parse(out.text()) as StatusSummary
    t.match(summary, {
      crds: 4,
      succeeded: 1,
      upToDate: 0,
      running: 1,
      pending: 1,
      failed: 1,
      frozenByAnother: 0,
      inFlight: 1,
      queued: 2,
      runningWithoutEta: 0,
    })
    // 150 left at 50 per 3,700 s: about 11,100 s (the seconds since the fixture was written add a little).
    t.ok(summary.etaSeconds! >= 11_100 && summary.etaSeconds! < 11_400, `ETA from the rate so far: ${summary.etaSeconds} s`)
    const crdReads = rec.requests.filter((r) => r.path.startsWith(CRD_API))
    t.same(crdReads.map((r) => r.path).sort(), fleet.map((n) => crdPath(n)).sort(), 'one GET per named CRD, no list of CRDs')
  })

  t.test('every managed CRD: the labelled ones by label, the rest from metadata; the table and its summary', async (t) => {
    const rec = recording(cp.kubeconfigPath)
    const out = collector()
    t.equal(await showStatus(rec, config, out.stream, { format: 'text', names: [] }), 0)
    const lists = rec.requests.filter((r) => r.path === CRD_API)
    t.ok(
      lists.every((r) => r.query?.labelSelector === labelSelector || r.accept === Accept.partialObjectMetadataList),
      'CRDs listed in full by the label selector only; otherwise as metadata',
      { lists },
    )
    t.notOk(rec.fullCrds.includes(unrelated), 'a CRD neither selected nor carrying our state is never read in full')
    const text = out.text()
    for (const name of fleet) t.match(text, new RegExp(`^${name.replace(/\./g, '\\.')}\\s`, 'm'), `${name} has its row`)
    t.notMatch(text, unrelated, 'the unrelated CRD has no row')
    // Other tests' CRDs that carry our state are shown too: the counts are at least ours.
    const m =
      /^(\d+) CRDs: (\d+) succeeded, (\d+) up to date, (\d+) running, (\d+) pending, (\d+) failed.*\nin flight: (\d+), queued: (\d+); ETA of the running: \S+/m.exec(
        text,
      )
    t.ok(m, 'the summary follows the table', { text })
    const [crds, succeeded, , running, pending, failedCount] = m!.slice(1).map(Number)
    t.ok(crds! >= 4 && succeeded! >= 1 && running! >= 1 && pending! >= 1 && failedCount! >= 1, 'counting ours')
  })

  t.test('-w: the table, then a row for each change, until stopped', async (t) => {
    const rec = recording(cp.kubeconfigPath)
    const out = collector()
    const stop = new AbortController()
    const watching = showStatus(rec, config, out.stream, {
      format: 'text',
      names: [running.name, pending.name],
      watch: true,
      signal: stop.signal,
    })
    t.teardown(() => stop.abort())
    await until(
      'the first table',
      30_000,
      async () => out.text(),
      (text) => text.split('\n').length === 4,
    )
    t.match(out.text(), /^NAME\s+STORAGE/, 'the table first')
    await patchCrdAnnotations(http, running.name, { [StateAnnotation.progress]: '120/200' })
    const text = await until(
      'the changed row',
      30_000,
      async () => out.text(),
      (text) => text.includes('120/200'),
    )
    const lines = text.trimEnd().split('\n')
    t.equal(lines.length, 4, 'one line more: the changed row, and nothing for the unchanged one', { text })
    t.match(
      lines[3],
      new RegExp(
        `^${running.name.replace(/\./g, '\\.')}\\s+v2\\s+v1,v2\\s+yes \\(crashed-replica\\)\\s+1h\\S*\\s+StorageVersionMigration\\s+120/200`,
      ),
    )
    t.equal(lines[3]!.indexOf('120/200'), lines[0]!.indexOf('PROGRESS'), 'at the widths of the first table')
    stop.abort()
    t.equal(await watching, 0, 'ends when stopped')
    t.ok(
      rec.requests.filter((r) => r.path === CRD_API).every((r) => /^metadata\.name=/.test(String(r.query?.fieldSelector))),
      'watching named CRDs watches those names only',
    )
  })

  t.test('-w: a freeze whose run died turns stale on the clock, with no change to its CRD', async (t) => {
    const before = await getCrd(http, running.name)
    const heartbeat = Date.parse(before.metadata.annotations![StateAnnotation.heartbeat]!)
    // Stale some seconds from now; nothing writes this CRD meanwhile (its run is dead).
    const takeoverAfterSeconds = Math.ceil((Date.now() - heartbeat) / 1000) + 8
    const soon = ConfigSchema.parse({ kubeconfig: cp.kubeconfigPath, migrator: { selector: { labelSelector }, takeoverAfterSeconds } })
    const out = collector()
    const stop = new AbortController()
    const watching = showStatus(http, soon, out.stream, { format: 'json', names: [running.name], watch: true, signal: stop.signal })
    t.teardown(() => stop.abort())
    const docs = () => jsonLines<unknown>(out.text())
    await until(
      'the first rows',
      30_000,
      async () => docs(),
      (d) => d.length === 1,
    )
    t.match(docs()[0], [{ name: running.name, state: 'Running', stale: false }], 'live at first')
    const after = await until(
      'the row turned stale',
      60_000,
      async () => docs(),
      (d) => d.length > 1,
    )
    t.match(after.at(-1), { name: running.name, state: 'Stale', stale: true }, 'one more document: the row, stale')
    const now = await getCrd(http, running.name)
    t.equal(now.metadata.resourceVersion, before.metadata.resourceVersion, 'the CRD was not written meanwhile')
    stop.abort()
    t.equal(await watching, 0)
  })

  t.test('-w --summary -o json: one summary document per change of the counts', async (t) => {
    const rec = recording(cp.kubeconfigPath)
    const out = collector()
    const stop = new AbortController()
    const watching = showStatus(rec, config, out.stream, {
      format: 'json',
      names: [running.name, pending.name],
      summary: true,
      watch: true,
      signal: stop.signal,
    })
    t.teardown(() => stop.abort())
    const docs = () => jsonLines<StatusSummary>(out.text())
    await until(
      'the first summary',
      30_000,
      async () => docs(),
      (d) => d.length === 1,
    )
    t.match(docs()[0], { crds: 2, running: 1, pending: 1 })
    await patchCrdAnnotations(http, pending.name, { [StateAnnotation.lastResult]: 'Failed: something' })
    await until(
      'the next summary',
      30_000,
      async () => docs(),
      (d) => d.length === 2,
    )
    t.match(docs()[1], { crds: 2, running: 1, pending: 0, failed: 1, queued: 1 })
    stop.abort()
    t.equal(await watching, 0)
  })

  t.test('-o json rows carry their state and ETA', async (t) => {
    const out = collector()
    t.equal(await showStatus(http, config, out.stream, { format: 'json', names: [running.name, migrated.name] }), 0)
    const rows = JSON.parse(out.text()) as StatusRow[]
    t.match(
      rows.find((r) => r.name === running.name),
      { state: 'Running', etaSeconds: Number },
    )
    t.match(
      rows.find((r) => r.name === migrated.name),
      { state: 'Succeeded' },
    )
    t.notOk('etaSeconds' in rows.find((r) => r.name === migrated.name)!, 'no ETA for a CRD not running')
    t.same((await getCrd(http, migrated.name)).status?.storedVersions, ['v2'])
  })

  t.test('a run that stopped an hour ago is stale at the default takeover time: its heartbeat age, no ETA', async (t) => {
    const byDefault = ConfigSchema.parse({ kubeconfig: cp.kubeconfigPath, migrator: { selector: { labelSelector } } })
    const json = collector()
    t.equal(await showStatus(http, byDefault, json.stream, { format: 'json', names: [running.name] }), 0)
    const [row] = JSON.parse(json.text()) as Array<Record<string, unknown>>
    t.match(row, { state: 'Stale', stale: true, frozen: true, frozenBy: 'crashed-replica' })
    t.ok(Number(row?.['heartbeatAgeSeconds']) >= 3600, `heartbeat age ${String(row?.['heartbeatAgeSeconds'])} s`)
    t.notOk('etaSeconds' in (row ?? {}), 'no ETA for a run that stopped')
    const text = collector()
    t.equal(await showStatus(http, byDefault, text.stream, { format: 'text', names: [running.name] }), 0)
    t.match(text.text(), /yes \(crashed-replica\)\s+1h\S*, stale\s+StorageVersionMigration/)
    t.match(text.text(), /1 stale \(its run stopped; the next run takes it over\)/)
  })
})
