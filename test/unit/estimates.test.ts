/**
 * Issue #36's estimates and words, the pure parts: the rate a burst of dry-run writes
 * gives and the words on what an estimate stands on; the plan's arithmetic on a measured
 * basis; the managedFields column and next step for entries of a served old version.
 */
import t from 'tap'
import { CONSTANT_BASIS, MS_PER_CRD, planRow, planSummary, type EstimateBasis, type PlanRow } from '../../src/check/fleet-plan.js'
import { formatEstimate } from '../../src/cli/plan/plan-format.js'
import { describeBasis, measuredBasis, MIN_SAMPLES, objectsPerSecond, type WriteSample } from '../../src/check/write-rate.js'
import { formatPlan, managedFieldsCell, servedNextSteps } from '../../src/cli/plan/plan-format.js'
import type { ManagedFieldsEntry } from '../../src/kube/types.js'
import { servedKeptVersions, type ManagedFieldsPolicy } from '../../src/migrator/phases/managed-fields.js'
import { servedKeptSteps } from '../../src/migrator/report.js'

const sample = (s: Partial<WriteSample>): WriteSample => ({ written: 100, failed: 0, wallMs: 2000, concurrency: 64, ...s })

t.test('measuredBasis: the burst throughput, capped by --qps; a reason when too little succeeded', async (t) => {
  const rows: Array<[what: string, s: WriteSample, qps: number, objectsPerSecond: number | undefined, reason?: RegExp]> = [
    ['100 dry-run writes in 2 s: 50/s, real writes likely 50/1.6', sample({}), 0, 31.3],
    ['--qps below the rate caps it', sample({}), 20, 20],
    ['--qps above the rate changes nothing', sample({}), 500, 31.3],
    ['failures do not count as writes', sample({ written: 51, failed: 49, wallMs: 1000 }), 0, 31.9],
    ['exactly the minimum', sample({ written: MIN_SAMPLES, wallMs: 1500 }), 0, 4.2],
    [
      'one short of the minimum',
      sample({ written: MIN_SAMPLES - 1 }),
      0,
      undefined,
      /9 of 9 dry-run writes succeeded, 10 needed \(too few objects to sample\)/,
    ],
    [
      'every write refused: the first refusal said',
      sample({ written: 0, failed: 40, firstError: 'CRDM_FORBIDDEN: PATCH …: 403' }),
      0,
      undefined,
      /0 of 40 dry-run writes succeeded, 10 needed: CRDM_FORBIDDEN/,
    ],
    ['no time measured', sample({ wallMs: 0 }), 0, undefined, /no measurable time/],
  ]
  for (const [what, s, qps, rate, reason] of rows) {
    const got = measuredBasis(s, qps)
    if (rate === undefined) {
      t.ok('reason' in got, what)
      if ('reason' in got) t.match(got.reason, reason!, what)
      continue
    }
    t.ok('basis' in got, what)
    if (!('basis' in got)) continue
    t.equal(objectsPerSecond(got.basis), rate, what)
    t.equal(got.basis.source, 'measured')
    t.equal(got.basis.samples, s.written)
    t.equal(got.basis.msPerCrd, MS_PER_CRD, "the per-CRD cost stays the bench's")
  }
  const ranged = measuredBasis(sample({}), 0)
  t.ok('basis' in ranged)
  if ('basis' in ranged)
    t.same(
      ranged.basis.range,
      { fastMsPerObject: 1000 / 50, slowMsPerObject: 1000 / 20 },
      'the range: the dry-run rate itself (50/s) down to 50/2.5 = 20/s',
    )
  const capped = measuredBasis(sample({}), 30)
  if ('basis' in capped)
    t.same(capped.basis.range, { fastMsPerObject: 1000 / 30, slowMsPerObject: 1000 / 20 }, '--qps caps the fast end too')
})

t.test('describeBasis: measured says so and on how many writes; the constant says what it is and suggests --measure', async (t) => {
  const measured: EstimateBasis = {
    msPerObject: 1000 / 40,
    range: { fastMsPerObject: 1000 / 64, slowMsPerObject: 1000 / 25.6 },
    msPerCrd: MS_PER_CRD,
    source: 'measured',
    samples: 180,
    dryRunPerSecond: 64,
  }
  t.match(
    describeBasis(measured),
    /^measured on this cluster: 180 dry-run writes \(dryRun=All: nothing stored\) at 64\/s; a real write also costs the etcd write a dry run skips, so 25\.6–64 objects\/s \(likely 40\), plus 2\.4 s per CRD/,
  )
  t.match(
    describeBasis(CONSTANT_BASIS),
    /^a rough constant: 519 objects\/s and 2\.4 s per CRD, measured by the bench on another machine; .*run plan --measure/,
  )
  t.match(
    describeBasis(CONSTANT_BASIS, '0 of 5 dry-run writes succeeded'),
    /^could not measure \(0 of 5 dry-run writes succeeded\); a rough constant/,
  )
})

t.test('planRow and planSummary on a measured basis', async (t) => {
  // The run: 4,000 objects took 101 s, about 40 objects/s.
  const basis: EstimateBasis = { msPerObject: 25, msPerCrd: 2000, source: 'measured', samples: 200 }
  const base = { storageVersion: 'v2', blockedReason: undefined, managedFieldsObjects: 0 }
  const rows = [
    planRow({ ...base, name: 'a', storedVersions: ['v1', 'v2'], objects: 4000 }, basis),
    planRow({ ...base, name: 'b', storedVersions: ['v1', 'v2'], objects: 1000, managedFieldsObjects: 200 }, basis),
    planRow({ ...base, name: 'c', storedVersions: ['v2'], objects: 50 }, basis),
  ]
  t.strictSame(
    rows.map((r) => [r.name, r.writes, r.estimateMs]),
    [
      ['a', 4000, 2000 + 4000 * 25],
      ['b', 1200, 2000 + 1200 * 25],
      ['c', 0, 0],
    ],
  )
  const s = planSummary(rows, 4, basis)
  t.equal(s.serialMs, 2 * 2000 + 5200 * 25)
  t.equal(s.parallelMs, 2000 + 5200 * 25, 'the fixed costs overlap, the writes share one budget')
  t.equal(planSummary(rows, 1, basis).parallelMs, s.serialMs)
  t.not(
    planRow({ ...base, name: 'a', storedVersions: ['v1', 'v2'], objects: 4000 }).estimateMs,
    rows[0]!.estimateMs,
    'the default is the constant',
  )
  t.equal(rows[0]!.estimateRangeMs, undefined, 'no range without one in the basis')
  const ranged: EstimateBasis = { ...basis, range: { fastMsPerObject: 10, slowMsPerObject: 40 } }
  const r = planRow({ ...base, name: 'a', storedVersions: ['v1', 'v2'], objects: 4000 }, ranged)
  t.same(r.estimateRangeMs, [2000 + 4000 * 10, 2000 + 4000 * 40], 'a measured basis gives a range, fastest to slowest')
  const rs = planSummary([r], 4, ranged)
  t.same(rs.parallelRangeMs, [42_000, 162_000])
  t.same(rs.serialRangeMs, [42_000, 162_000])
  t.equal(
    planRow({ ...base, name: 'a', storedVersions: ['v1', 'v2'], objects: 3 }, { ...basis, msPerObject: 1000 / 3 }).estimateMs,
    3000,
    'whole milliseconds',
  )
})

t.test('formatEstimate: a range when measured, one figure otherwise', async (t) => {
  t.equal(formatEstimate(63_000), '1 min 3 s')
  t.equal(formatEstimate(63_000, [40_000, 100_000]), '40 s – 1 min 40 s')
  t.equal(formatEstimate(1000, [1000, 1040]), '1 s', 'the same when rounded: one figure')
})

const GROUP = 'example.com'
const policy: ManagedFieldsPolicy = {
  group: GROUP,
  servedVersions: new Set(['v1beta1', 'v1', 'v2']),
  storageVersion: 'v2',
  rewriteServedNonStorage: false,
  relabelUnserved: true,
}
const entry = (apiVersion: string): ManagedFieldsEntry => ({
  manager: 'm',
  operation: 'Apply',
  apiVersion,
  fieldsType: 'FieldsV1',
  fieldsV1: {},
})

t.test('servedKeptVersions: entries of served, non-storage versions of the group, which the cleanup leaves', async (t) => {
  const rows: Array<[what: string, entries: ManagedFieldsEntry[] | undefined, p: ManagedFieldsPolicy, versions: string[]]> = [
    ['none', undefined, policy, []],
    ['storage version only', [entry(`${GROUP}/v2`)], policy, []],
    ['a served old version', [entry(`${GROUP}/v1`), entry(`${GROUP}/v2`)], policy, ['v1']],
    ['two, sorted, each once', [entry(`${GROUP}/v1`), entry(`${GROUP}/v1beta1`), entry(`${GROUP}/v1`)], policy, ['v1', 'v1beta1']],
    ['an unserved version: the cleanup takes it', [entry(`${GROUP}/v1alpha1`)], policy, []],
    ['another group', [entry('other.com/v1')], policy, []],
    ['rewriteServedNonStorage: the cleanup moves them', [entry(`${GROUP}/v1`)], { ...policy, rewriteServedNonStorage: true }, []],
  ]
  for (const [what, entries, p, versions] of rows) t.strictSame(servedKeptVersions(entries, p), versions, what)
})

t.test('plan: the managedFields cell and the next step', async (t) => {
  const cell: Array<[what: string, row: Pick<PlanRow, 'managedFieldsObjects' | 'servedManagedFields'>, scanned: boolean, text: string]> = [
    ['not scanned', { managedFieldsObjects: undefined }, false, '-'],
    ['unknown (forbidden)', { managedFieldsObjects: undefined }, true, '?'],
    ['nothing', { managedFieldsObjects: 0, servedManagedFields: {} }, true, '0'],
    ['cleanup work', { managedFieldsObjects: 12 }, true, '12'],
    ['a served old version', { managedFieldsObjects: 0, servedManagedFields: { v1: 4000 } }, true, '0 (4000 at served v1)'],
    ['both', { managedFieldsObjects: 3, servedManagedFields: { v1: 5, v1beta1: 1 } }, true, '3 (5 at served v1, 1 at served v1beta1)'],
  ]
  for (const [what, row, scanned, text] of cell) t.equal(managedFieldsCell(row, scanned), text, what)
  const row = planRow({
    name: 'w.example.com',
    storageVersion: 'v2',
    storedVersions: ['v1', 'v2'],
    blockedReason: undefined,
    objects: 4000,
    managedFieldsObjects: 0,
    servedManagedFields: { v1: 4000 },
  })
  t.strictSame(servedNextSteps([row]), [
    'w.example.com: 4000 objects keep managedFields entries of v1, which is still served: a migration leaves them by design, and check --drop v1 counts them. To drop v1: set served: false on v1, then run migrate again.',
  ])
  t.strictSame(servedNextSteps([{ ...row, servedManagedFields: {} }]), [])
})

t.test('migrate: the next step after a cleanup that left entries of a served version', async (t) => {
  t.strictSame(servedKeptSteps(undefined), [], 'a cleanup that kept nothing')
  t.strictSame(servedKeptSteps({}), [])
  t.strictSame(servedKeptSteps({ v1: { entries: 1, objects: 1 } }), [
    '1 object keeps 1 managedFields entry of v1, which is still served (left by design; check --drop v1 counts them): to drop v1, set served: false on it, then run migrate again',
  ])
  t.strictSame(
    servedKeptSteps({ v1: { objects: 20 } }),
    [
      '20 objects keep managedFields entries of v1, which is still served (left by design; check --drop v1 counts them): to drop v1, set served: false on it, then run migrate again',
    ],
    'the dry run counts objects, not entries',
  )
})

t.test('plan: a CRD whose lossless check refuses is blocked, left out of the estimate, its changes listed', async (t) => {
  const base = { storageVersion: 'v2', storedVersions: ['v1', 'v2'], blockedReason: undefined, managedFieldsObjects: 0, objects: 100 }
  const lines = [
    '  lossless check (...): 100 checked, 100 would change',
    '    spec.t removed  100 object(s)  refused',
    "  accept on purpose with: --accept-changes 'a.example.com:spec.t'",
  ]
  const refused = planRow({
    ...base,
    name: 'a.example.com',
    lossless: { refuses: true, checked: 100, complete: true, lossy: 100, unchecked: 0, lines },
  })
  const fine = planRow({
    ...base,
    name: 'b.example.com',
    lossless: { refuses: false, checked: 100, complete: true, lossy: 0, unchecked: 0, lines: lines.slice(0, 1) },
  })
  const s = planSummary([refused, fine], 4)
  t.equal(s.blocked, 1, 'counted blocked')
  t.equal(s.needingWork, 1, 'only the other needs work')
  t.equal(s.writes, 100, 'the blocked CRD writes nothing')
  const text = formatPlan(
    { rows: [refused, fine], summary: { ...s, estimate: 'e', basis: { source: 'constant', objectsPerSecond: 1 } }, missing: [] },
    true,
  )
  t.match(text, /a\.example\.com .*blocked: CRDM_DATA_LOSS \(below\)\s+-/, 'marked in the table, no estimate')
  t.match(text, '1 of 2 CRDs need work, 1 blocked')
  t.match(
    text,
    `a.example.com: the run would stop Blocked (CRDM_DATA_LOSS)\n${lines.join('\n')}`,
    'its changes and the accept line under the table',
  )
  t.notMatch(text, 'b.example.com: the run', 'nothing said of a CRD that passes')
})
