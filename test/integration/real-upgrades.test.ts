/**
 * Real operator upgrades, through each project's own conversion code (built from its Go
 * module: dev/tools/capi-conversion, dev/tools/tekton-conversion; scripts/build-upgrades.sh),
 * with the product's CLI run as a user runs it, along the whole path:
 *
 *   Cluster API v1.10.6 (cluster.x-k8s.io/v1beta1 stored) → v1.11.0 (storage v1beta2) →
 *   v1.14.2 with v1beta1 unserved → v1.14.2 without v1beta1;
 *   Tekton Pipelines v0.48.0 (tekton.dev/v1beta1 stored) → v0.49.0 (storage v1) →
 *   v0.49.0 with v1beta1 unserved → v0.49.0 without v1beta1.
 *
 * No release of either stops serving its old version or drops it yet (CAPI v1.14.2 still
 * serves v1beta1, deprecated); those two steps are the new release's CRDs with the old
 * version patched to served: false, then removed.
 *
 * For each CRD: `migrate` without consent ends Blocked (CRDM_DATA_LOSS) when the conversion
 * drops, moves or adds fields, and etcd is unchanged; `migrate --accept-changes
 * <crd>:<field path>` (each change the conversion makes, named at or above its path)
 * migrates, status.storedVersions becomes [storage]; once the old version is unserved
 * `migrate` passes again without writing and `check --drop` says yes; the release without
 * the old version applies. etcd then holds every object at the new version with exactly the
 * content the API server showed of it through the new version before the migration, and the
 * old version's view of it differs from what was stored only where consent was given.
 *
 * CAPI's `cluster.x-k8s.io/conversion-data` annotation (what v1beta2 holds that v1beta1
 * cannot, kept on the v1beta1 view) is never stored: nothing here names it in a consent.
 */
import t from 'tap'
import { hasPath } from '../../src/migrator/lossless/content-diff.js'
import { CliRun } from '../helpers/cli-run.js'
import { getControlPlane, uniqueName } from '../helpers/controlplane.js'
import {
  applyCrds,
  content,
  covers,
  deleteCrds,
  diffValues,
  ensureUpgradeTools,
  etcdObjects,
  readCrds,
  readThrough,
  startRealWebhook,
  withConversion,
  withoutVersions,
  withUnserved,
  type CrdManifest,
  type Obj,
  pathPattern,
  type RealWebhook,
  type UpgradeTools,
  type ValueChange,
} from '../helpers/real-upgrades.js'
import { capiObjects, capiProviderCrds, createObjects, tektonObjects, type NewObject } from '../helpers/real-upgrades-objects.js'

// A first run builds the webhooks (scripts/build-upgrades.sh, a few minutes cold).
t.setTimeout(30 * 60_000)
const cp = await getControlPlane()
const tools = await ensureUpgradeTools()
t.setTimeout(Number(process.env['TAP_TIMEOUT'] ?? '600') * 1000)

const PER_KIND = 20

interface Upgrade {
  project: string
  group: string
  plurals: string[]
  from: string
  to: string
  /** CRD directories: the release the objects are created in, the one that flips storage, the one whose old version goes. */
  releases: (tools: UpgradeTools) => { old: string; flip: string; last: string }
  webhook: (tools: UpgradeTools) => Promise<RealWebhook>
  setup?: () => Promise<void>
  objects: (ns: string) => NewObject[]
  /**
   * What the conversion changes in a round trip through the new version, by plural: the
   * field paths given as consent (`--accept-changes <crd>:<path>`). A plural left out
   * converts without a change and migrates without consent.
   */
  consent: Record<string, string[]>
  /**
   * Per plural, field patterns the round trip adds to the old version's view but the
   * storage version does not store: reported as bookkeeping, never refused, never consented.
   */
  bookkeeping: Record<string, string[]>
}

const upgrades: Upgrade[] = [
  {
    project: 'Cluster API',
    group: 'cluster.x-k8s.io',
    plurals: ['clusters', 'machinedeployments', 'machinesets', 'machines'],
    from: 'v1beta1',
    to: 'v1beta2',
    releases: (tools) => ({ old: tools.capiCrds['v1.10.6']!, flip: tools.capiCrds['v1.11.0']!, last: tools.capiCrds['v1.14.2']! }),
    webhook: (tools) => startRealWebhook('capi-conversion', tools.capiConversion, [`--kubeconfig=${cp.kubeconfigPath}`]),
    setup: async () => {
      const providers = capiProviderCrds() as CrdManifest[]
      await applyCrds(cp, providers)
      t.teardown(() =>
        deleteCrds(
          cp,
          providers.map((c) => c.metadata.name),
        ),
      )
    },
    objects: (ns) => capiObjects(ns, PER_KIND),
    consent: {
      // v1beta2's failureDomains is a list whose controlPlane: false v1beta1 (omitempty) drops.
      clusters: ['status.failureDomains'],
      machinedeployments: ['spec.revisionHistoryLimit', 'spec.progressDeadlineSeconds'],
      machines: ['status.nodeRef.uid'],
    },
    bookkeeping: {
      clusters: ['metadata.annotations["cluster.x-k8s.io/conversion-data"]'],
      machinedeployments: ['metadata.annotations["cluster.x-k8s.io/conversion-data"]'],
      machines: ['metadata.annotations["cluster.x-k8s.io/conversion-data"]'],
    },
  },
  {
    project: 'Tekton Pipelines',
    group: 'tekton.dev',
    plurals: ['tasks', 'pipelines', 'taskruns', 'pipelineruns'],
    from: 'v1beta1',
    to: 'v1',
    releases: (tools) => ({ old: tools.tektonCrds['v0.48.0']!, flip: tools.tektonCrds['v0.49.0']!, last: tools.tektonCrds['v0.49.0']! }),
    webhook: (tools) => startRealWebhook('tekton-conversion', tools.tektonConversion),
    objects: (ns) => tektonObjects(ns, PER_KIND),
    consent: {
      tasks: ['spec.results[*].type'],
      taskruns: ['metadata.labels["app.kubernetes.io/managed-by"]', 'status.provenance.configSource'],
      pipelineruns: [
        'spec.timeout',
        'spec.timeouts',
        'spec.workspaces[*].volumeClaimTemplate.metadata',
        'spec.workspaces[*].volumeClaimTemplate.status',
        'status.provenance.configSource',
      ],
    },
    // v1 keeps a step's resources as computeResources: the empty `resources` the way back adds is not stored.
    bookkeeping: {
      tasks: ['spec.steps[*].resources'],
      taskruns: ['status.taskSpec.steps[*].resources'],
    },
  },
]

interface CliResult {
  code: number | null
  stdout: string
  stderr: string
}

async function cli(args: string[]): Promise<CliResult> {
  const run = new CliRun([...args, '--kubeconfig', cp.kubeconfigPath])
  const exit = await run.exited
  return { code: exit.code, stdout: run.stdout, stderr: run.stderr }
}
/** What `migrate -o json` prints of one CRD (the parts read here). */
interface MigrateResult {
  outcome: string
  errorCode?: string
  lossless?: {
    findings: Array<{ key: string; changes: Array<{ path: string; change: string; from?: string }> }>
    changes: Array<{ pattern: string; change: string; from?: string; verdict: string; objects: number }>
  }
}
const said = (r: CliResult) => `exit ${r.code}\n${r.stdout}${r.stderr}`

async function storedVersions(name: string): Promise<string[]> {
  const res = await cp.apiRequest(`/apis/apiextensions.k8s.io/v1/customresourcedefinitions/${name}`)
  return ((res.json as { status?: { storedVersions?: string[] } }).status?.storedVersions ?? []).slice().sort()
}

/** Every object of every plural as etcd holds it, by `plural/namespace/name`. */
async function etcdAll(u: Upgrade, plurals = u.plurals): Promise<Map<string, Obj>> {
  const out = new Map<string, Obj>()
  for (const p of plurals) for (const [k, v] of await etcdObjects(cp, u.group, p)) out.set(`${p}/${k}`, v)
  return out
}

const apiVersionsOf = (objects: Map<string, Obj>) => [...new Set([...objects.values()].map((o) => String(o['apiVersion'])))]

for (const u of upgrades) {
  t.test(`${u.project}: ${u.from} → ${u.to}, then ${u.from} unserved and dropped`, async (t) => {
    const names = u.plurals.map((p) => `${p}.${u.group}`)
    const crdOf = (plural: string) => `${plural}.${u.group}`
    const lossy = u.plurals.filter((p) => p in u.consent && u.consent[p]!.length > 0)
    const releases = u.releases(tools)
    const ns = uniqueName('upgrade')
    const webhook = await u.webhook(tools)
    // One teardown, in order: the objects and CRDs go while their webhook still answers.
    t.teardown(async () => {
      await cp.apiRequest(`/api/v1/namespaces/${ns}`, { method: 'DELETE' })
      await deleteCrds(cp, names).finally(() => webhook.stop())
    })
    await deleteCrds(cp, names) // a kept control plane of an earlier run
    await u.setup?.()

    // The old release, its objects, then the release that flips storage.
    const old = (await readCrds(releases.old, names)).map((c) => withConversion(c, webhook))
    await applyCrds(cp, old)
    await cp.apiRequest('/api/v1/namespaces', { method: 'POST', body: { apiVersion: 'v1', kind: 'Namespace', metadata: { name: ns } } })
    await createObjects(cp, u.group, u.from, ns, u.objects(ns))
    const flip = (await readCrds(releases.flip, names)).map((c) => withConversion(c, webhook))
    await applyCrds(cp, flip)
    const before = await etcdAll(u)
    t.equal(before.size, u.plurals.length * PER_KIND, `${before.size} objects in etcd`)
    t.same(apiVersionsOf(before), [`${u.group}/${u.from}`], `every object stored at ${u.from}`)
    for (const n of names)
      t.same(await storedVersions(n), [u.from, u.to].sort(), `${n}: storedVersions [${u.from}, ${u.to}] after the flip`)

    // What the API server shows of the stored objects through each version (the webhook converts).
    const viaNew = new Map<string, Obj>()
    const viaOld = new Map<string, Obj>()
    for (const p of u.plurals) {
      for (const [k, v] of await readThrough(cp, u.group, u.to, p)) viaNew.set(`${p}/${k}`, v)
      for (const [k, v] of await readThrough(cp, u.group, u.from, p)) viaOld.set(`${p}/${k}`, v)
    }
    t.same(apiVersionsOf(viaNew), [`${u.group}/${u.to}`], `every object read through ${u.to}`)
    t.ok((await webhook.reviews()) > 0, `${webhook.name} converted them (${await webhook.reviews()} ConversionReviews so far)`)
    // What the conversion makes of the stored content (for the record: consent is about the round trip).
    for (const p of u.plurals) {
      const paths = new Map<string, number>()
      for (const [k, o] of viaNew)
        if (k.startsWith(`${p}/`))
          for (const c of diffValues(content(before.get(k)!), content(o))) {
            const key = `${pathPattern(c.path)} ${c.change}`
            paths.set(key, (paths.get(key) ?? 0) + 1)
          }
      t.comment(`${p} ${u.from} → ${u.to} (objects): ${JSON.stringify(Object.fromEntries(paths))}`)
    }
    const unlike = [...viaOld].filter(([k, o]) => diffValues(content(before.get(k)!), content(o)).length > 0).map(([k]) => k)
    t.same(unlike, [], `every object read through ${u.from} as stored`)

    await t.test('before consent: the CRDs whose conversion changes content end Blocked, etcd unchanged', async (t) => {
      const runs = await Promise.all(names.map((n) => cli(['migrate', n, '-o', 'json', '--progress-every', '0'])))
      for (const [i, p] of u.plurals.entries()) {
        const r = runs[i]!
        const result = (JSON.parse(r.stdout || '[]') as MigrateResult[])[0]
        const changes = new Map<string, number>()
        for (const f of result?.lossless?.findings ?? [])
          for (const c of f.changes)
            changes.set(`${pathPattern(c.path)} ${c.change}`, (changes.get(`${pathPattern(c.path)} ${c.change}`) ?? 0) + 1)
        t.comment(
          `migrate ${crdOf(p)}: exit ${r.code}, ${result?.outcome} ${result?.errorCode ?? ''}; changes (objects): ${JSON.stringify(Object.fromEntries(changes))}`,
        )
        // Round-trip data the storage version does not hold: reported as bookkeeping, not refused.
        for (const pattern of u.bookkeeping[p] ?? [])
          t.ok(
            result?.lossless?.changes.some((c) => c.pattern === pattern && c.verdict === 'bookkeeping' && c.objects === PER_KIND),
            `${crdOf(p)}: ${pattern} reported as bookkeeping on every object, not refused`,
          )
        t.notOk(
          result?.lossless?.changes.some((c) => c.verdict === 'refused' && (u.bookkeeping[p] ?? []).includes(c.pattern)),
          `${crdOf(p)}: no bookkeeping among the refusals`,
        )
        if (lossy.includes(p)) {
          t.not(r.code, 0, `${crdOf(p)}: exit non-zero`)
          t.equal(`${result?.outcome} ${result?.errorCode}`, 'Blocked CRDM_DATA_LOSS', `${crdOf(p)}: Blocked, CRDM_DATA_LOSS`)
          // A move names both ends: where the value was and where it went.
          const named = (result?.lossless?.findings ?? []).flatMap((f) => f.changes.flatMap((c) => [c.path, ...(c.from ? [c.from] : [])]))
          for (const path of u.consent[p]!)
            t.ok(
              named.some((c) => covers(path, c)),
              `${crdOf(p)}: a change at ${path} reported`,
            )
          t.same(await storedVersions(crdOf(p)), [u.from, u.to].sort(), `${crdOf(p)}: storedVersions untouched`)
        } else {
          t.equal(r.code, 0, `${crdOf(p)}: converts without a change, migrated without consent`)
          t.same(await storedVersions(crdOf(p)), [u.to], `${crdOf(p)}: storedVersions [${u.to}]`)
        }
      }
      const after = await etcdAll(u, lossy)
      t.same(
        [...after].filter(([k, o]) => JSON.stringify(o) !== JSON.stringify(before.get(k))).map(([k]) => k),
        [],
        `etcd unchanged: ${after.size} objects of ${lossy.join(', ')} as they were`,
      )
    })

    // A release that stops serving the old version before anyone consented: the objects can
    // no longer be read as stored, and the check holds them to their managedFields (fields
    // the old version's managers set, which the new shape renames or drops): still refused.
    await t.test(`${u.from} unserved before consent: still refused, etcd unchanged`, async (t) => {
      const unserved = flip.map((c) => withUnserved(c, u.from))
      await applyCrds(
        cp,
        unserved.filter((c) => lossy.some((p) => crdOf(p) === (c['metadata'] as { name: string }).name)),
      )
      const runs = await Promise.all(lossy.map((p) => cli(['migrate', crdOf(p), '-o', 'json', '--progress-every', '0'])))
      for (const [i, p] of lossy.entries()) {
        const result = (JSON.parse(runs[i]!.stdout || '[]') as Array<MigrateResult & { reason?: string }>)[0]
        t.comment(
          `migrate ${crdOf(p)} (${u.from} unserved): exit ${runs[i]!.code}, ${result?.outcome} ${result?.errorCode ?? ''}: ${(result?.reason ?? '').slice(0, 400)}`,
        )
        t.not(runs[i]!.code, 0, `${crdOf(p)}: exit non-zero`)
        t.equal(
          `${result?.outcome} ${result?.errorCode}`,
          'Blocked CRDM_DATA_LOSS',
          `${crdOf(p)}: Blocked, CRDM_DATA_LOSS: ${said(runs[i]!).slice(0, 600)}`,
        )
        t.same(await storedVersions(crdOf(p)), [u.from, u.to].sort(), `${crdOf(p)}: storedVersions untouched`)
      }
      const after = await etcdAll(u, lossy)
      t.same(
        [...after].filter(([k, o]) => JSON.stringify(o) !== JSON.stringify(before.get(k))).map(([k]) => k),
        [],
        'etcd unchanged',
      )
      // Served again, as the release before it: the full check can read them.
      await applyCrds(
        cp,
        flip.filter((c) => lossy.some((p) => crdOf(p) === (c['metadata'] as { name: string }).name)),
      )
    })

    let migrated = false
    await t.test('with consent: migrated, storedVersions [storage]', async (t) => {
      const runs = await Promise.all(
        lossy.map((p) =>
          cli([
            'migrate',
            crdOf(p),
            '--progress-every',
            '0',
            ...u.consent[p]!.flatMap((path) => ['--accept-changes', `${crdOf(p)}:${path}`]),
          ]),
        ),
      )
      for (const [i, p] of lossy.entries()) {
        t.comment(`migrate ${crdOf(p)} --accept-changes ...: ${said(runs[i]!)}`)
        t.equal(runs[i]!.code, 0, `${crdOf(p)}: migrated`)
        t.same(await storedVersions(crdOf(p)), [u.to], `${crdOf(p)}: storedVersions [${u.to}]`)
      }
      migrated = (await Promise.all(names.map(storedVersions))).every((v) => v.join() === u.to)
    })
    // The rest stands on a migration that happened: un-serving the old version over objects
    // still stored in it would let the next `migrate` rewrite them unchecked (they cannot be
    // read as stored), which is not the path under test.
    if (!migrated) {
      t.fail(`not every CRD migrated to ${u.to}; the old version is left served and the rest of the path is not run`)
      return
    }

    await t.test(
      `etcd: every object at ${u.to}, its content the old content converted, changed only where consent was given`,
      async (t) => {
        const after = await etcdAll(u)
        t.equal(after.size, before.size, 'no object lost')
        t.same(apiVersionsOf(after), [`${u.group}/${u.to}`], `every object stored at ${u.to}`)
        const differing = [...after]
          .map(([k, o]) => ({ k, changes: diffValues(content(viaNew.get(k)!), content(o)) }))
          .filter((d) => d.changes.length)
        t.same(differing, [], `every object stored with the content ${u.to} showed of it before the migration (values compared)`)

        // The old version's view now against the old content: differences only under a consent
        // (or what the conversion writes on the old view only, which etcd does not hold).
        const stray: Array<{ k: string; changes: ValueChange[] }> = []
        const viewOnly = new Map<string, number>()
        for (const p of u.plurals) {
          for (const [key, o] of await readThrough(cp, u.group, u.from, p)) {
            const k = `${p}/${key}`
            const changes = diffValues(content(before.get(k)!), content(o)).filter((c) => {
              if ((u.consent[p] ?? []).some((q) => covers(q, c.path))) return false
              // Added on the old view and not held by etcd at that path: the round trip's bookkeeping.
              if (c.change === 'added' && !hasPath(after.get(k)!, c.path)) {
                viewOnly.set(c.path, (viewOnly.get(c.path) ?? 0) + 1)
                return false
              }
              return true
            })
            if (changes.length) stray.push({ k, changes })
          }
        }
        t.same(stray, [], `the ${u.from} view of every object differs from its old content only under a consent`)
        if (viewOnly.size)
          t.comment(`fields the ${u.from} view adds and etcd does not hold (objects): ${JSON.stringify(Object.fromEntries(viewOnly))}`)
      },
    )

    await t.test(`${u.from} unserved: migrate passes, content unchanged, check --drop ${u.from} says yes`, async (t) => {
      const last = (await readCrds(releases.last, names)).map((c) => withUnserved(withConversion(c, webhook), u.from))
      await applyCrds(cp, last)
      const settled = await etcdAll(u)
      const again = await Promise.all(names.map((n) => cli(['migrate', n, '--progress-every', '0'])))
      for (const [i, n] of names.entries()) {
        t.comment(`migrate ${n} (${u.from} unserved): ${said(again[i]!)}`)
        t.equal(again[i]!.code, 0, `${n}: migrate passes`)
        t.same(await storedVersions(n), [u.to], `${n}: storedVersions [${u.to}]`)
      }
      // Only managedFields entries of the now unserved version may go (the cleanup); content stays.
      const unchanged = await etcdAll(u)
      t.same(
        [...unchanged].filter(([k, o]) => diffValues(content(settled.get(k)!), content(o)).length > 0).map(([k]) => k),
        [],
        `content of all ${unchanged.size} objects unchanged`,
      )
      const checks = await Promise.all(names.map((n) => cli(['check', n, '--drop', u.from])))
      for (const [i, n] of names.entries()) {
        t.comment(`check ${n} --drop ${u.from}: ${said(checks[i]!)}`)
        t.equal(checks[i]!.code, 0, `${n}: safe to drop ${u.from}`)
      }
    })

    await t.test(`the release without ${u.from} applies`, async (t) => {
      const dropped = (await readCrds(releases.last, names)).map((c) => withoutVersions(withConversion(c, webhook), [u.from]))
      const applied = await applyCrds(cp, dropped)
      for (const crd of applied) {
        const versions = (crd['spec'] as { versions: Array<{ name: string }> }).versions.map((v) => v.name)
        t.notOk(versions.includes(u.from), `${(crd['metadata'] as { name: string }).name}: ${u.from} gone (${versions.join(', ')})`)
      }
      const final = await etcdAll(u)
      t.same(apiVersionsOf(final), [`${u.group}/${u.to}`], `every object still stored at ${u.to}`)
      for (const p of u.plurals) t.equal((await readThrough(cp, u.group, u.to, p)).size, PER_KIND, `${p}: every object served at ${u.to}`)
    })
  })
}
