/**
 * Hostile input for the running HTTPS webhook: at least 10,000 generated and mutated
 * AdmissionReviews (truncated JSON, wrong types, missing fields, deep nesting, huge
 * annotations, unicode, duplicate keys, __proto__, flipped bytes, wrong content types),
 * POSTed over keep-alive connections, 16 at a time.
 *
 * Checked for every request:
 * - the process answers (never crashes, never a 5xx, never a dropped connection);
 * - the answer is a JSON error with the status the input calls for (400 not JSON, nested
 *   too deep, too many objects/arrays, or not an AdmissionReview, 413 over the body limit,
 *   415 not application/json), or an AdmissionReview carrying the request's uid;
 * - its `allowed` is the decision function's on the same input (what the handler would
 *   decide when called directly), and
 * - fail closed, by an oracle written here independently of the webhook: an UPDATE or
 *   DELETE of a CRD that is, or may be, frozen (marker unreadable) by a user who is not
 *   break-glass is never allowed when it changes storage, when storage cannot be read,
 *   when object/oldObject are not objects, or (non-migrators) when it touches the
 *   annotation or the state a resumed run trusts (owner, checkpoint...).
 *
 * Reproduce: CRD_MIGRATOR_FUZZ_SEED=<seed printed below> [CRD_MIGRATOR_FUZZ_COUNT=n]. Each
 * case is generated from (seed, index) alone, so a failure names its index.
 */
import { randomInt } from 'node:crypto'
import { mkdtemp, rm } from 'node:fs/promises'
import https from 'node:https'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { performance } from 'node:perf_hooks'
import { Writable } from 'node:stream'
import { pino } from 'pino'
import t from 'tap'
import { DEFAULT_MIGRATING_ANNOTATION, DEFAULT_MIGRATOR_USERS } from '../../src/config/annotations.js'
import { generateDevCertificates } from '../../dev/certs/devcerts.js'
import { DEFAULT_ADMISSION_POLICY, type AdmissionPolicy } from '../../src/webhook/admission.js'
import { MAX_JSON_DEPTH, MIN_BYTES_PER_JSON_CONTAINER } from '../../src/webhook/limits.js'
import { parseAdmissionReview, reviewAdmission } from '../../src/webhook/review.js'
import { startWebhookServer } from '../../src/webhook/server.js'
import { readinessReport } from '../../src/health/plugin.js'

const SEED = Number(process.env['CRD_MIGRATOR_FUZZ_SEED'] ?? randomInt(1, 2 ** 31 - 1))
const COUNT = Number(process.env['CRD_MIGRATOR_FUZZ_COUNT'] ?? 10_000)
const CONCURRENCY = 16
const BODY_LIMIT = 1024 * 1024
const KEY = DEFAULT_MIGRATING_ANNOTATION
const MIGRATOR = DEFAULT_MIGRATOR_USERS[0]!
const MIGRATOR_GROUP = 'crd-migrators'
const BREAK_GLASS = 'system:masters'
const policy: AdmissionPolicy = { ...DEFAULT_ADMISSION_POLICY, migratorGroups: [MIGRATOR_GROUP] }

// --- a seeded PRNG -------------------------------------------------------------------------

function mulberry32(seed: number): () => number {
  let a = seed >>> 0
  return () => {
    a = (a + 0x6d2b79f5) >>> 0
    let x = Math.imul(a ^ (a >>> 15), 1 | a)
    x = (x + Math.imul(x ^ (x >>> 7), 61 | x)) ^ x
    return ((x ^ (x >>> 14)) >>> 0) / 4294967296
  }
}

class Rng {
  private readonly next: () => number
  constructor(seed: number, index: number) {
    this.next = mulberry32((seed ^ Math.imul(index + 1, 0x9e3779b1)) >>> 0)
  }
  float(): number {
    return this.next()
  }
  int(max: number): number {
    return Math.floor(this.next() * max)
  }
  chance(p: number): boolean {
    return this.next() < p
  }
  pick<T>(xs: readonly T[]): T {
    return xs[this.int(xs.length)]!
  }
}

// --- valid reviews -------------------------------------------------------------------------

type Json = null | boolean | number | string | Json[] | { [k: string]: Json }
type Obj = { [k: string]: Json }

function crd(rng: Rng, o: { frozen?: boolean; storage?: string; extraAnnotations?: Obj } = {}): Obj {
  const names = ['v1alpha1', 'v1beta1', 'v1']
  const storage = o.storage ?? rng.pick(names)
  const annotations: Obj = { ...(o.frozen ? { [KEY]: 'true', 'crd-migrator.io/owner': 'replica-a' } : {}), ...o.extraAnnotations }
  return {
    apiVersion: 'apiextensions.k8s.io/v1',
    kind: 'CustomResourceDefinition',
    metadata: {
      name: 'widgets.example.com',
      uid: 'c0ffee00-0000-4000-8000-000000000001',
      resourceVersion: String(1000 + rng.int(9000)),
      generation: 3,
      annotations,
      labels: { team: 'platform' },
    },
    spec: {
      group: 'example.com',
      names: { plural: 'widgets', singular: 'widget', kind: 'Widget', listKind: 'WidgetList' },
      scope: 'Namespaced',
      versions: names.map((name) => ({
        name,
        served: true,
        storage: name === storage,
        schema: { openAPIV3Schema: { type: 'object', 'x-kubernetes-preserve-unknown-fields': true } },
      })),
    },
    status: { storedVersions: [storage], acceptedNames: { plural: 'widgets', kind: 'Widget' } },
  }
}

const USERS: Array<{ username?: string; groups?: string[] }> = [
  { username: 'alice', groups: ['system:authenticated'] },
  { username: MIGRATOR, groups: ['system:serviceaccounts', 'system:authenticated'] },
  { username: 'bob', groups: [MIGRATOR_GROUP, 'system:authenticated'] },
  { username: 'kubernetes-admin', groups: [BREAK_GLASS, 'system:authenticated'] },
  { username: '', groups: [] },
  {},
  { username: 'ａｌｉｃｅ', groups: ['system:masters\u200b'] }, // look-alikes are nobody special
]

function validReview(rng: Rng, uid: string): Obj {
  const frozenOld = crd(rng, { frozen: true, storage: 'v1beta1' })
  const scenarios: Array<() => { operation: string; old: Json | undefined; object: Json | undefined }> = [
    () => ({ operation: 'UPDATE', old: frozenOld, object: crd(rng, { frozen: true, storage: 'v1' }) }), // storage flip, frozen
    () => ({
      operation: 'UPDATE',
      old: frozenOld,
      object: crd(rng, { frozen: true, storage: 'v1beta1', extraAnnotations: { note: 'x' } }),
    }), // harmless edit
    () => ({ operation: 'UPDATE', old: frozenOld, object: crd(rng, { storage: 'v1beta1' }) }), // unfreeze
    () => ({ operation: 'UPDATE', old: crd(rng, { storage: 'v1beta1' }), object: crd(rng, { frozen: true, storage: 'v1beta1' }) }), // freeze
    () => ({ operation: 'UPDATE', old: crd(rng, { storage: 'v1beta1' }), object: crd(rng, { storage: 'v1' }) }), // unfrozen flip
    () => ({ operation: 'DELETE', old: frozenOld, object: null }),
    () => ({ operation: 'CREATE', old: null, object: crd(rng, { frozen: rng.chance(0.5) }) }),
    () => ({ operation: rng.pick(['CONNECT', 'UPDATE']), old: frozenOld, object: frozenOld }),
  ]
  const s = rng.pick(scenarios)()
  const otherResource = rng.chance(0.05)
  const request: Obj = {
    uid,
    kind: otherResource
      ? { group: 'apps', version: 'v1', kind: 'Deployment' }
      : { group: 'apiextensions.k8s.io', version: 'v1', kind: 'CustomResourceDefinition' },
    resource: otherResource
      ? { group: 'apps', version: 'v1', resource: 'deployments' }
      : { group: 'apiextensions.k8s.io', version: 'v1', resource: 'customresourcedefinitions' },
    requestKind: { group: 'apiextensions.k8s.io', version: 'v1', kind: 'CustomResourceDefinition' },
    name: 'widgets.example.com',
    operation: s.operation,
    userInfo: rng.pick(USERS),
    dryRun: rng.chance(0.1),
    options: { apiVersion: 'meta.k8s.io/v1', kind: 'UpdateOptions' },
  }
  if (s.old !== undefined) request['oldObject'] = s.old
  if (s.object !== undefined) request['object'] = s.object
  return { apiVersion: 'admission.k8s.io/v1', kind: 'AdmissionReview', request }
}

// --- mutations -----------------------------------------------------------------------------

/** Paths to every node of a JSON value (bounded). */
function paths(value: Json, prefix: Array<string | number> = [], out: Array<Array<string | number>> = []): Array<Array<string | number>> {
  if (out.length > 400) return out
  out.push(prefix)
  if (Array.isArray(value)) value.forEach((v, i) => paths(v, [...prefix, i], out))
  else if (value !== null && typeof value === 'object') for (const [k, v] of Object.entries(value)) paths(v, [...prefix, k], out)
  return out
}

function parentOf(root: Json, path: Array<string | number>): { parent: Obj | Json[]; key: string | number } | undefined {
  if (path.length === 0) return undefined
  let node: Json = root
  for (const k of path.slice(0, -1)) node = (node as Obj)[k as string] as Json
  if (node === null || typeof node !== 'object') return undefined
  return { parent: node, key: path[path.length - 1]! }
}

const UNICODE = [
  '\u0000',
  '\u202e',
  '\u200b',
  '\ufeff',
  'é',
  'e\u0301',
  '𝔘𝔫𝔦',
  '🦄',
  '\ud800',
  '\udfff',
  '\u2028',
  'ksvm\u2024sigs',
  '中文',
  'ـ',
  '\\',
  '"',
  '\n',
]

function unicodeString(rng: Rng): string {
  let s = ''
  const n = 1 + rng.int(12)
  for (let i = 0; i < n; i++) s += rng.pick(UNICODE)
  return s
}

function wrongValue(rng: Rng): Json {
  return rng.pick<() => Json>([
    () => null,
    () => true,
    () => false,
    () => 0,
    () => -1,
    () => 1e308,
    () => 0.5,
    () => '',
    () => 'true',
    () => unicodeString(rng),
    () => [],
    () => [null],
    () => ({}),
    () => ({ storage: true }),
    () => ({ [KEY]: 'true' }),
    () => 'x'.repeat(rng.int(5000)),
  ])()
}

const DEEP = '__CRD_MIGRATOR_FUZZ_DEEP__'

/** Object-level mutations; returns a label for the statistics. */
function mutateValue(rng: Rng, root: Obj): string {
  const all = paths(root)
  const kind = rng.int(9)
  switch (kind) {
    case 0: {
      // a node gets a value of another type
      const p = parentOf(root, rng.pick(all))
      if (!p) return 'noop'
      ;(p.parent as Obj)[p.key as string] = wrongValue(rng)
      return 'wrong-type'
    }
    case 1: {
      // a key or element disappears
      const p = parentOf(root, rng.pick(all))
      if (!p) return 'noop'
      if (Array.isArray(p.parent)) p.parent.splice(p.key as number, 1)
      else delete p.parent[p.key as string]
      return 'missing-field'
    }
    case 2: {
      // deep nesting somewhere (inserted as text later)
      const p = parentOf(root, rng.pick(all))
      if (!p) return 'noop'
      ;(p.parent as Obj)[p.key as string] = DEEP
      return 'deep-nesting'
    }
    case 3: {
      // a huge annotation (sometimes over the body limit)
      const req = root['request'] as Obj | undefined
      const target = req && (req[rng.pick(['object', 'oldObject'])] as Obj | undefined)
      const meta = target && typeof target === 'object' ? (target['metadata'] as Obj | undefined) : undefined
      const ann = meta && typeof meta === 'object' && !Array.isArray(meta) ? (meta['annotations'] as Obj | undefined) : undefined
      if (!ann || typeof ann !== 'object' || Array.isArray(ann)) return 'noop'
      const size = rng.chance(0.03)
        ? BODY_LIMIT + rng.int(BODY_LIMIT / 2)
        : rng.chance(0.1)
          ? 32 * 1024 + rng.int(96 * 1024)
          : 512 + rng.int(8 * 1024)
      ann[`huge-${rng.int(100)}.example.com/data`] =
        size > BODY_LIMIT || rng.chance(0.7) ? 'A'.repeat(size) : rng.pick(['é', '🦄', '\u2028']).repeat(size / 4)
      return 'huge-annotation'
    }
    case 4: {
      // unicode in a string value, or a key renamed
      const p = parentOf(root, rng.pick(all))
      if (!p) return 'noop'
      if (!Array.isArray(p.parent) && rng.chance(0.5)) {
        const v = p.parent[p.key as string]!
        delete p.parent[p.key as string]
        p.parent[`${String(p.key)}${unicodeString(rng)}`] = v
      } else {
        ;(p.parent as Obj)[p.key as string] = unicodeString(rng)
      }
      return 'unicode'
    }
    case 5: {
      // the freeze marker, bent: look-alike keys and values, non-strings
      const req = root['request'] as Obj | undefined
      const target = req && (req[rng.pick(['object', 'oldObject'])] as Obj | undefined)
      const meta = target && typeof target === 'object' && !Array.isArray(target) ? (target['metadata'] as Obj | undefined) : undefined
      if (!target || !meta || typeof meta !== 'object' || Array.isArray(meta)) return 'noop'
      const variants: Array<() => void> = [
        () => {
          meta['annotations'] = { [KEY]: rng.pick<Json>([true, 1, 'True', ' true', 'true\u0000', ['true'], { value: 'true' }, null]) }
        },
        () => {
          meta['annotations'] = { [`${KEY} `]: 'true', [KEY.toUpperCase()]: 'true', [KEY.replace('.', '\u2024')]: 'true' }
        },
        () => {
          meta['annotations'] = rng.pick<Json>(['ksvm.sigs.k8s.io/migrating=true', [KEY], 7, null])
        },
        () => {
          meta['annotations'] = JSON.parse(`{"__proto__": {"${KEY}": "true"}}`) as Obj
        },
        () => {
          target['metadata'] = rng.pick<Json>([null, 'metadata', [], 0])
        },
      ]
      rng.pick(variants)()
      return 'freeze-marker'
    }
    case 6: {
      // spec.versions, bent
      const req = root['request'] as Obj | undefined
      const target = req && (req[rng.pick(['object', 'oldObject'])] as Obj | undefined)
      const spec = target && typeof target === 'object' && !Array.isArray(target) ? (target['spec'] as Obj | undefined) : undefined
      if (!spec || typeof spec !== 'object' || Array.isArray(spec)) return 'noop'
      const versions = spec['versions']
      spec['versions'] = rng.pick<Json>([
        null,
        {},
        'v1',
        [null],
        [{ storage: true }],
        [{ name: 7, storage: true }],
        [{ name: 'v1', storage: 'true' }],
        [
          { name: 'v1', storage: true },
          { name: 'v1', storage: true },
        ],
        [{ name: 'v1beta1', storage: 1 }],
        Array.isArray(versions) ? [...versions].reverse() : [],
        Array.isArray(versions) ? [...versions, { name: 'v2', served: true, storage: true }] : [],
      ])
      return 'versions'
    }
    case 7: {
      // userInfo, bent
      const req = root['request'] as Obj | undefined
      if (!req || typeof req !== 'object') return 'noop'
      req['userInfo'] = rng.pick<Json>([
        { username: MIGRATOR, groups: 'system:masters' },
        { groups: [BREAK_GLASS, 7] },
        { username: [MIGRATOR] },
        { username: 'alice', groups: [`${BREAK_GLASS} `, BREAK_GLASS.toUpperCase()] },
        null,
        'admin',
        { username: 'alice', extra: { x: [BREAK_GLASS] } },
      ])
      return 'user-info'
    }
    default: {
      // envelope fields
      const keys = ['apiVersion', 'kind', 'request']
      const k = rng.pick(keys)
      root[k] = rng.pick<Json>([wrongValue(rng), 'admission.k8s.io/v1beta1', 'AdmissionReview', 'admission.k8s.io/v1'])
      return 'envelope'
    }
  }
}

function deepText(rng: Rng): string {
  const depth = rng.pick([16, 64, 256, 1000, 1000, 10_000, 30_000])
  return rng.chance(0.5) ? `${'['.repeat(depth)}${']'.repeat(depth)}` : `${'{"a":'.repeat(depth)}1${'}'.repeat(depth)}`
}

/** Text-level mutations of the serialized body. */
function mutateText(rng: Rng, text: string): { text: string; label?: string } {
  const kind = rng.int(6)
  switch (kind) {
    case 0:
      return { text: text.slice(0, rng.int(text.length)), label: 'truncated' }
    case 1: {
      // duplicate keys: a second "request" (JSON.parse keeps the last)
      const i = text.lastIndexOf('}')
      if (i < 0) return { text }
      const other = JSON.stringify(validReview(rng, `dup-${rng.int(1000)}`)['request'])
      return { text: `${text.slice(0, i)},"request":${other}}`, label: 'duplicate-key' }
    }
    case 2: {
      // bytes flipped
      const chars = [...text]
      for (let n = 1 + rng.int(4); n > 0 && chars.length > 0; n--)
        chars[rng.int(chars.length)] = rng.pick(['{', '}', '"', ',', ':', '\\', '\u0000', 'x', ' ', ']'])
      return { text: chars.join(''), label: 'bytes-flipped' }
    }
    case 3:
      return {
        text: rng.pick(['', ' ', 'null', '[]', '"review"', '42', 'true', '{}', '\ufeff{}', '{"apiVersion":"admission.k8s.io/v1"']),
        label: 'garbage',
      }
    default:
      return { text }
  }
}

interface Case {
  index: number
  body: Buffer
  contentType: string | undefined
  labels: string[]
}

function makeCase(index: number): Case {
  const rng = new Rng(SEED, index)
  const uid = rng.chance(0.02) ? unicodeString(rng) : `fuzz-${SEED}-${index}`
  const review = validReview(rng, uid)
  const labels: string[] = []
  const mutations = rng.pick([0, 1, 1, 1, 2, 2, 3])
  for (let i = 0; i < mutations; i++) labels.push(mutateValue(rng, review))
  let text = JSON.stringify(review)
  if (text.includes(`"${DEEP}"`)) text = text.replace(`"${DEEP}"`, deepText(rng))
  if (rng.chance(0.15)) {
    const m = mutateText(rng, text)
    text = m.text
    if (m.label) labels.push(m.label)
  }
  const contentType = rng.chance(0.05)
    ? rng.pick([undefined, 'text/plain', 'application/x-www-form-urlencoded', 'application/yaml', 'application/json-patch+json'])
    : rng.pick(['application/json', 'application/json', 'application/json; charset=utf-8'])
  if (!contentType?.startsWith('application/json') || contentType.startsWith('application/json-')) labels.push('content-type')
  return { index, body: Buffer.from(text, 'utf8'), contentType, labels: labels.length ? labels : ['valid'] }
}

// --- the oracle ------------------------------------------------------------------------------

const isObj = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v)

/** What the annotation says: 'frozen', 'thawed' (absent or another string), or 'unreadable'. */
function marker(o: unknown): 'frozen' | 'thawed' | 'unreadable' {
  if (!isObj(o) || !isObj(o['metadata'])) return 'unreadable'
  const a = o['metadata']['annotations']
  if (a === undefined || a === null) return 'thawed'
  if (!isObj(a)) return 'unreadable'
  if (!Object.prototype.hasOwnProperty.call(a, KEY)) return 'thawed'
  const v = a[KEY]
  return typeof v !== 'string' ? 'unreadable' : v === 'true' ? 'frozen' : 'thawed'
}

function storageOf(o: Record<string, unknown>): string | undefined {
  const spec = o['spec']
  if (spec === undefined) return ''
  if (!isObj(spec)) return undefined
  const vs = spec['versions']
  if (vs === undefined || vs === null) return ''
  if (!Array.isArray(vs)) return undefined
  const names: string[] = []
  for (const v of vs) {
    if (!isObj(v)) return undefined
    if (v['storage'] === true) {
      if (typeof v['name'] !== 'string') return undefined
      names.push(v['name'])
    }
  }
  return [...new Set(names)].sort().join('\u0001')
}

/** A reason the request must be denied, or undefined when the oracle has no objection. */
function mustDeny(review: Record<string, unknown>): string | undefined {
  const req = review['request'] as Record<string, unknown>
  const r = req['resource'] as Record<string, unknown>
  if (r['group'] !== 'apiextensions.k8s.io' || r['version'] !== 'v1' || r['resource'] !== 'customresourcedefinitions') return undefined
  const user = req['userInfo'] as Record<string, unknown>
  const groups = Array.isArray(user['groups']) ? (user['groups'] as string[]) : []
  const breakGlass = groups.includes(BREAK_GLASS)
  const migrator = user['username'] === MIGRATOR || groups.includes(MIGRATOR_GROUP)
  const op = req['operation']
  const { object, oldObject } = req
  if (op === 'UPDATE') {
    if (!isObj(object) || !isObj(oldObject)) return 'UPDATE without both objects'
    const before = marker(oldObject)
    const after = marker(object)
    if (before === 'unreadable' || after === 'unreadable') return 'freeze marker unreadable'
    if (breakGlass) return undefined
    if (before === 'frozen') {
      const s1 = storageOf(oldObject)
      const s2 = storageOf(object)
      if (s1 === undefined || s2 === undefined) return 'storage of a frozen CRD unreadable'
      if (s1 !== s2) return 'storage changed on a frozen CRD'
    }
    const a1 = (oldObject['metadata'] as Record<string, unknown>)['annotations'] as Record<string, unknown> | null | undefined
    const a2 = (object['metadata'] as Record<string, unknown>)['annotations'] as Record<string, unknown> | null | undefined
    const v1 = a1 && Object.prototype.hasOwnProperty.call(a1, KEY) ? a1[KEY] : undefined
    const v2 = a2 && Object.prototype.hasOwnProperty.call(a2, KEY) ? a2[KEY] : undefined
    if (v1 !== v2 && !migrator) return 'the freeze annotation touched by a non-migrator'
    if (before === 'frozen' && !migrator) {
      for (const key of ['owner', 'heartbeat', 'checkpoint', 'target-storage-version', 'frozen-generation'].map(
        (k) => `crd-migrator.io/${k}`,
      )) {
        // Values that are not strings are not looked into: they count as a change.
        const o = a1 && Object.prototype.hasOwnProperty.call(a1, key) ? a1[key] : undefined
        const n = a2 && Object.prototype.hasOwnProperty.call(a2, key) ? a2[key] : undefined
        const weird = (o !== undefined && typeof o !== 'string') || (n !== undefined && typeof n !== 'string')
        if (weird || o !== n) return `${key} changed on a frozen CRD by a non-migrator`
      }
    }
  }
  if (op === 'DELETE') {
    if (!isObj(oldObject)) return 'DELETE without oldObject'
    const m = marker(oldObject)
    if (m === 'unreadable') return 'freeze marker unreadable'
    if (m === 'frozen' && !breakGlass) return 'DELETE of a frozen CRD'
  }
  return undefined
}

interface Expected {
  status: number
  /** The decision function threw (a bug; the server answers internal-error, denied). */
  threw?: string
  /** For 200: the decision function's verdict and the request's uid. */
  allowed?: boolean
  uid?: string
  mustDeny?: string
}

/**
 * Nesting depth and number of objects/arrays of valid JSON text, strings taken out by a
 * regular expression. From the text, not the parsed value: a duplicate key's first value
 * is parsed too, then dropped.
 */
function shapeOfText(text: string): { depth: number; containers: number } {
  const bare = text.replace(/"[^"\\]*(?:\\.[^"\\]*)*"/g, '""')
  let depth = 0
  let deepest = 0
  let containers = 0
  for (const ch of bare) {
    if (ch === '[' || ch === '{') {
      containers++
      deepest = Math.max(deepest, ++depth)
    } else if (ch === ']' || ch === '}') depth--
  }
  return { depth: deepest, containers }
}

function expected(c: Case): Expected {
  const ct = c.contentType?.split(';')[0]?.trim().toLowerCase()
  // No content type and no body: Fastify runs the handler with no body (not an AdmissionReview).
  if (c.contentType === undefined && c.body.length === 0) return { status: 400 }
  if (ct !== 'application/json') return { status: 415 }
  if (c.body.length > BODY_LIMIT) return { status: 413 }
  const text = c.body.toString('utf8')
  if (text.trim() === '') return { status: 400 }
  let value: unknown
  try {
    value = JSON.parse(text)
  } catch {
    return { status: 400 }
  }
  // Refused before parsing: deeper than the limit, or more objects/arrays than it allows.
  const shape = shapeOfText(text)
  if (shape.depth > MAX_JSON_DEPTH || shape.containers > Math.max(1024, Math.floor(BODY_LIMIT / MIN_BYTES_PER_JSON_CONTAINER)))
    return { status: 400 }
  const parsed = parseAdmissionReview(value)
  if (!parsed.ok) return { status: 400 }
  const deny = mustDeny(value as Record<string, unknown>)
  let allowed = false
  let threw: string | undefined
  try {
    allowed = reviewAdmission(parsed.request, policy).allowed
  } catch (err) {
    threw = (err as Error).message
  }
  return { status: 200, allowed, uid: parsed.request.uid, ...(threw ? { threw } : {}), ...(deny ? { mustDeny: deny } : {}) }
}

// --- the run -------------------------------------------------------------------------------

interface Answer {
  status: number
  body: string
  contentType: string | undefined
}

function post(agent: https.Agent, url: URL, c: Case): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const headers: Record<string, string | number> = { 'content-length': c.body.length }
    if (c.contentType !== undefined) headers['content-type'] = c.contentType
    const req = https.request(url, { method: 'POST', agent, headers, timeout: 30_000 }, (res) => {
      const chunks: Buffer[] = []
      res.on('data', (d: Buffer) => chunks.push(d))
      res.on('end', () =>
        resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString('utf8'), contentType: res.headers['content-type'] }),
      )
      res.on('error', reject)
    })
    req.on('timeout', () => req.destroy(new Error('timed out')))
    req.on('error', reject)
    req.end(c.body)
  })
}

t.test(`fuzz: ${COUNT} generated and mutated AdmissionReviews against the running HTTPS webhook`, async (t) => {
  t.comment(`seed ${SEED} (reproduce with CRD_MIGRATOR_FUZZ_SEED=${SEED})`)
  const dir = await mkdtemp(join(tmpdir(), 'crd-migrator-fuzz-'))
  t.teardown(() => rm(dir, { recursive: true, force: true }))
  const certs = await generateDevCertificates(dir)
  // Logging on (to a sink): the log line of each review is part of what must not crash.
  const sink = new Writable({
    write(_chunk, _enc, done) {
      done()
    },
  })
  const server = await startWebhookServer({
    certFile: certs.certFile,
    keyFile: certs.keyFile,
    host: '127.0.0.1',
    port: 0,
    logger: pino({ level: 'info' }, sink),
    bodyLimitBytes: BODY_LIMIT,
    policy: { migratorUsers: [MIGRATOR], migratorGroups: [MIGRATOR_GROUP], breakGlassGroups: [BREAK_GLASS] },
  })
  const agent = new https.Agent({ keepAlive: true, maxSockets: CONCURRENCY, ca: certs.caCertPem })
  t.teardown(async () => {
    agent.destroy()
    await server.close()
  })
  const url = new URL('/validate-crd', server.url)
  let uncaught: unknown
  const onUncaught = (err: unknown) => {
    uncaught ??= err
  }
  process.on('uncaughtException', onUncaught)
  t.teardown(() => {
    process.off('uncaughtException', onUncaught)
  })

  const problems: string[] = []
  const byStatus: Record<number, number> = {}
  const byLabel: Record<string, number> = {}
  let allowed = 0
  let denied = 0
  let frozenGuarded = 0
  let bytes = 0
  let next = 0
  const t0 = performance.now()
  const worker = async () => {
    for (let i = next++; i < COUNT; i = next++) {
      const c = makeCase(i)
      for (const l of c.labels) byLabel[l] = (byLabel[l] ?? 0) + 1
      bytes += c.body.length
      const want = expected(c)
      let got: Answer
      try {
        got = await post(agent, url, c)
      } catch (err) {
        problems.push(`#${i} [${c.labels}]: no answer: ${(err as Error).message}`)
        continue
      }
      byStatus[got.status] = (byStatus[got.status] ?? 0) + 1
      let json: Record<string, unknown> | undefined
      try {
        json = JSON.parse(got.body) as Record<string, unknown>
      } catch {
        problems.push(`#${i} [${c.labels}]: HTTP ${got.status} answer is not JSON: ${got.body.slice(0, 100)}`)
        continue
      }
      if (!got.contentType?.startsWith('application/json')) problems.push(`#${i}: content-type ${got.contentType}`)
      if (got.status !== want.status) {
        problems.push(`#${i} [${c.labels}]: HTTP ${got.status}, expected ${want.status}: ${got.body.slice(0, 160)}`)
        continue
      }
      if (got.status !== 200) {
        if (typeof json['error'] !== 'string' || json['error'] === '') problems.push(`#${i}: HTTP ${got.status} without an error message`)
        continue
      }
      const response = json['response'] as Record<string, unknown> | undefined
      if (json['apiVersion'] !== 'admission.k8s.io/v1' || json['kind'] !== 'AdmissionReview' || !isObj(response)) {
        problems.push(`#${i}: HTTP 200 that is not an AdmissionReview: ${got.body.slice(0, 160)}`)
        continue
      }
      if (want.threw) problems.push(`#${i} [${c.labels}]: the decision function threw: ${want.threw}`)
      if (response['uid'] !== want.uid) problems.push(`#${i}: uid ${JSON.stringify(response['uid'])}, expected ${JSON.stringify(want.uid)}`)
      if (typeof response['allowed'] !== 'boolean') problems.push(`#${i}: allowed is not a boolean`)
      if (response['allowed'] !== want.allowed)
        problems.push(`#${i} [${c.labels}]: allowed ${String(response['allowed'])}, the decision function says ${String(want.allowed)}`)
      if (want.mustDeny) {
        frozenGuarded++
        if (response['allowed'] === true) problems.push(`#${i} [${c.labels}]: ALLOWED but must be denied (${want.mustDeny})`)
      }
      if (response['allowed'] === true) allowed++
      else denied++
    }
  }
  await Promise.all(Array.from({ length: CONCURRENCY }, worker))
  const seconds = (performance.now() - t0) / 1000

  t.same(problems.slice(0, 20), [], `every answer as expected (${problems.length} problems; seed ${SEED})`)
  t.equal(uncaught, undefined, 'no uncaught exception in the process')
  t.equal(
    Object.values(byStatus).reduce((a, b) => a + b, 0),
    COUNT,
    `all ${COUNT} requests answered`,
  )
  t.notOk(
    Object.keys(byStatus).some((s) => Number(s) >= 500),
    'never a 5xx',
  )
  t.ok((byStatus[200] ?? 0) > COUNT / 5 && (byStatus[400] ?? 0) > COUNT / 10, 'both well-formed and malformed reviews were exercised')
  t.ok(frozenGuarded > COUNT / 10, `the fail-closed oracle had work (${frozenGuarded} reviews that must be denied)`)
  const health = await post(agent, new URL('/healthz', server.url), {
    index: -1,
    body: Buffer.alloc(0),
    contentType: undefined,
    labels: [],
  }).catch(() => undefined)
  t.equal(health?.status, 404, 'still answering afterwards (POST /healthz is no route)')
  t.same(readinessReport(server.readiness).failing, [], 'and ready')
  t.comment(
    `fuzz: ${COUNT} requests (${(bytes / 1024 / 1024).toFixed(1)} MiB) in ${seconds.toFixed(1)} s (${Math.round(COUNT / seconds)}/s, ${CONCURRENCY} in flight), seed ${SEED}`,
  )
  t.comment(
    `  answers: ${JSON.stringify(byStatus)}; reviews allowed ${allowed}, denied ${denied}; ${frozenGuarded} had to be denied (fail closed) and were`,
  )
  t.comment(`  mutations: ${JSON.stringify(byLabel)}`)
})
