/**
 * Re-encrypting Secrets after an encryption-at-rest key rotation, proven in raw etcd: a
 * private control plane encrypts Secrets with aescbc, its key is rotated twice, and after
 * each rotation crd-migrator rewrites every Secret, once through the CLI (`migrate
 * --resource secrets`) and once through a StorageVersionMigration object, until etcd holds
 * each of them under the new key only.
 *
 * Each rotation restarts the API server. `--encryption-provider-config-automatic-reload`
 * works too, but the API server looks at the file once a minute (a hard-coded poll,
 * counted from its start; no flag shortens it): 45-56 s per rotation here, which would
 * make this file take two minutes. Either way the new key is in use only once a Secret
 * written now is stored under it (waitForWriteKey): a migration started before that would
 * re-encrypt everything with the old key.
 */
import { execFile } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { mkdtemp, rename, rm, writeFile } from 'node:fs/promises'
import os from 'node:os'
import path from 'node:path'
import { promisify } from 'node:util'
import PQueue from 'p-queue'
import { pino } from 'pino'
import t from 'tap'
import { stringify } from 'yaml'
import { ensureKsvm, installKsvmCrd } from '../../dev/bench/ksvm.js'
import { etcdPost, prefixRangeEnd } from '../../dev/controlplane/etcd.js'
import { ConfigSchema } from '../../src/config/schema.js'
import { RunLock } from '../../src/controller/run-lock.js'
import { KsvmMigrationController } from '../../src/controller/ksvm-controller.js'
import { KSVM_API, type StorageVersionMigration, type SvmConditionType, storageVersionMigration } from '../../src/controller/ksvm-state.js'
import { ContentType } from '../../src/kube/http.js'
import { listAndWatch } from '../../src/kube/watch.js'
import type { MigrationResult } from '../../src/migrator/context.js'
import { createNamespace, httpFor } from '../helpers/cluster.js'
import { startPrivateControlPlane } from '../helpers/controlplane.js'
import { until } from '../helpers/until.js'

const run = promisify(execFile)
const started = Date.now()
const elapsed = () => `${((Date.now() - started) / 1000).toFixed(1)} s`

interface AesKey {
  name: string
  secret: string
}
const aesKey = (name: string): AesKey => ({ name, secret: randomBytes(32).toString('base64') })
const [key1, key2, key3] = [aesKey('key1'), aesKey('key2'), aesKey('key3')]

/** Secrets are written with the first key; every listed key (and plain text) can be read. */
function encryptionConfig(keys: AesKey[]): string {
  return stringify({
    apiVersion: 'apiserver.config.k8s.io/v1',
    kind: 'EncryptionConfiguration',
    resources: [{ resources: ['secrets'], providers: [{ aescbc: { keys } }, { identity: {} }] }],
  })
}

const dir = await mkdtemp(path.join(os.tmpdir(), 'crd-migrator-encryption-'))
t.teardown(() => rm(dir, { recursive: true, force: true }))
const configFile = path.join(dir, 'encryption-config.yaml')

/** Replaces the file in one step (a rename), so the API server never reads half of it. */
async function writeEncryptionConfig(keys: AesKey[]): Promise<void> {
  const next = `${configFile}.next`
  await writeFile(next, encryptionConfig(keys), { mode: 0o600 })
  await rename(next, configFile)
}

await writeEncryptionConfig([key1])
const cp = await startPrivateControlPlane({ extraApiserverFlags: { 'encryption-provider-config': configFile } })
t.comment(`control plane ready after ${elapsed()}`)
const http = httpFor(cp.kubeconfigPath)

const SECRETS = '/registry/secrets/'

/** Every stored Secret, by etcd key: its raw value, read in one range request. */
async function storedSecrets(): Promise<Map<string, Buffer>> {
  const res = await etcdPost<{ kvs?: Array<{ key: string; value?: string }> }>(cp.etcdEndpoint, '/v3/kv/range', {
    key: Buffer.from(SECRETS).toString('base64'),
    range_end: prefixRangeEnd(SECRETS).toString('base64'),
  })
  return new Map((res.kvs ?? []).map((kv) => [Buffer.from(kv.key, 'base64').toString('utf8'), Buffer.from(kv.value ?? '', 'base64')]))
}

/** The aescbc key a value was encrypted with, or `plaintext` when it is not encrypted. */
function encryptedWith(value: Buffer): string {
  return /^k8s:enc:aescbc:v1:([^:]+):/.exec(value.subarray(0, 64).toString('latin1'))?.[1] ?? 'plaintext'
}

/** The etcd keys whose value does not start with `k8s:enc:aescbc:v1:<key>:`. */
function notUnder(stored: Map<string, Buffer>, key: AesKey): string[] {
  const prefix = `k8s:enc:aescbc:v1:${key.name}:`
  return [...stored].filter(([, value]) => !value.subarray(0, prefix.length).toString('latin1').startsWith(prefix)).map(([k]) => k)
}

/** How many stored Secrets each key encrypts. */
async function keyCounts(stored?: Map<string, Buffer>): Promise<Record<string, number>> {
  const counts: Record<string, number> = {}
  for (const value of (stored ?? (await storedSecrets())).values()) {
    const key = encryptedWith(value)
    counts[key] = (counts[key] ?? 0) + 1
  }
  return counts
}

interface Secret {
  metadata: { name: string; namespace: string; resourceVersion?: string }
  data?: Record<string, string>
}

const secretPath = (ns: string, name = '') => `/api/v1/namespaces/${ns}/secrets${name ? `/${name}` : ''}`

/** What the API server answers for every Secret, by `namespace/name`. */
async function secretsThroughApi(): Promise<Map<string, Record<string, string>>> {
  const list = (await http.request<{ items: Secret[] }>({ method: 'GET', path: '/api/v1/secrets' })).body
  return new Map(list.items.map((s) => [`${s.metadata.namespace}/${s.metadata.name}`, s.data ?? {}]))
}

const CANARY_NS = 'default'
const CANARY = 'rotation-canary'
let canaryWrites = 0

/**
 * Waits until the API server writes Secrets with `key`: rewrites a canary Secret (a real
 * change, so each is a write) until etcd shows it encrypted with that key.
 */
async function waitForWriteKey(key: AesKey, timeoutMs: number): Promise<void> {
  await until(
    `the API server to write with ${key.name} (the key of the canary's last write last)`,
    timeoutMs,
    async () => {
      await http.request({
        method: 'PATCH',
        path: secretPath(CANARY_NS, CANARY),
        contentType: ContentType.mergePatch,
        body: { stringData: { write: String(++canaryWrites) } },
      })
      const stored = await cp.readEtcdKey(`${SECRETS}${CANARY_NS}/${CANARY}`)
      return stored ? encryptedWith(stored) : undefined
    },
    (writtenWith) => writtenWith === key.name,
    { everyMs: 250 },
  )
}

/** Rotates to `keys` (the first one writes) and returns once the API server writes with it. */
async function rotate(keys: [AesKey, ...AesKey[]]): Promise<string> {
  const since = Date.now()
  await writeEncryptionConfig(keys)
  await cp.stopApiserver()
  const stoppedMs = Date.now() - since
  await cp.startApiserver()
  const readyMs = Date.now() - since
  // Its keep-alive connections went with the old process.
  http.close()
  await waitForWriteKey(keys[0], 30_000)
  const names = keys.map((k) => k.name).join(', ')
  return `rotated to ${names}: API server stopped after ${stoppedMs} ms, ready after ${readyMs} ms, writing with ${keys[0].name} after ${Date.now() - since} ms`
}

const NAMESPACES = ['rotation-a', 'rotation-b']
const COUNT = 60
/** The data each Secret was created with, by `namespace/name` (base64, as the API returns it). */
const created = new Map<string, Record<string, string>>()

t.test('Secrets are stored encrypted with key1', async (t) => {
  for (const ns of NAMESPACES) await createNamespace(http, ns)
  const queue = new PQueue({ concurrency: 16 })
  for (let i = 0; i < COUNT; i++) {
    const ns = NAMESPACES[i % NAMESPACES.length]!
    const name = `secret-${String(i).padStart(3, '0')}`
    const data = {
      password: randomBytes(24).toString('base64'),
      'config.json': Buffer.from(JSON.stringify({ index: i, token: randomBytes(8).toString('hex') })).toString('base64'),
    }
    created.set(`${ns}/${name}`, data)
    void queue.add(() =>
      http.request({ method: 'POST', path: secretPath(ns), body: { apiVersion: 'v1', kind: 'Secret', metadata: { name }, data } }),
    )
  }
  await queue.onIdle()
  await http.request({
    method: 'POST',
    path: secretPath(CANARY_NS),
    body: { apiVersion: 'v1', kind: 'Secret', metadata: { name: CANARY }, stringData: { write: '0' } },
  })

  const stored = await storedSecrets()
  t.same(
    [...stored.keys()].sort(),
    [...created.keys(), `${CANARY_NS}/${CANARY}`].map((k) => `${SECRETS}${k}`).sort(),
    `etcd holds the ${COUNT} Secrets and the canary (the API server made none of its own)`,
  )
  t.same(notUnder(stored, key1), [], 'every value starts with k8s:enc:aescbc:v1:key1:')
  t.comment(`created after ${elapsed()}`)
})

t.test('rotated to key2: `migrate --resource secrets` re-encrypts every Secret', async (t) => {
  t.comment(await rotate([key2, key1]))
  t.same(await keyCounts(), { key1: COUNT, key2: 1 }, 'a rotation alone re-encrypts nothing: only the canary is under key2')

  const args = ['dist/cli/main.js', 'migrate', '--resource', 'secrets', '--kubeconfig', cp.kubeconfigPath, '-o', 'json']
  const cliStarted = Date.now()
  const cli = await run(process.execPath, args, { cwd: process.cwd() }).catch(
    (err: { code?: number; stdout?: string; stderr?: string }) => {
      throw new Error(`migrate --resource secrets exited ${err.code}:\nstdout:\n${err.stdout}\nstderr:\n${err.stderr}`)
    },
  )
  const results = JSON.parse(cli.stdout) as MigrationResult[]
  t.comment(`migrate --resource secrets took ${Date.now() - cliStarted} ms, its migration ${results[0]?.durationMs} ms`)
  t.match(
    results,
    [{ crd: 'secrets', outcome: 'Succeeded', storage: { counts: { seen: COUNT + 1, rewritten: COUNT, current: 1, failed: 0 } } }],
    'exit 0: the API server wrote the 60 Secrets read with key1, and not the canary, already under key2',
    { stdout: cli.stdout },
  )
  t.comment(`migrated after ${elapsed()}`)

  const stored = await storedSecrets()
  t.same(notUnder(stored, key2), [], 'every value in etcd starts with k8s:enc:aescbc:v1:key2:')
  t.same(await keyCounts(stored), { key2: COUNT + 1 }, 'none under key1')
  const api = await secretsThroughApi()
  t.same([...stored.keys()].sort(), [...api.keys()].map((k) => `${SECRETS}${k}`).sort(), 'etcd holds exactly the Secrets the API lists')
  t.same(
    Object.fromEntries([...created.keys()].map((k) => [k, api.get(k)])),
    Object.fromEntries(created),
    'every Secret reads back with the data it was created with',
  )
})

t.test('rotated to key3: a StorageVersionMigration re-encrypts every Secret', async (t) => {
  t.comment(await rotate([key3, key2]))
  // Installed after the restart: a custom resource's storage answers 429 for a moment after
  // a start, and installKsvmCrd waits until it lists.
  const ksvm = await ensureKsvm()
  if (!ksvm) throw new Error('kube-storage-version-migrator is not built: bash scripts/build-ksvm.sh')
  await installKsvmCrd(http, ksvm.crd)
  t.same(await keyCounts(), { key2: COUNT, key3: 1 }, 'only the canary is under key3 yet')

  // Every state the object goes through, from a watch started before it exists: a run
  // however short still shows Running before Succeeded.
  const seen: SvmConditionType[] = []
  const stop = new AbortController()
  const name = 'secrets-key3'
  let svm: StorageVersionMigration | undefined
  let result: MigrationResult | undefined
  const watching = listAndWatch<StorageVersionMigration>(
    http,
    KSVM_API,
    {
      onObject: (object) => {
        if (object.metadata.name !== name) return
        const current = object.status?.conditions?.find((c) => c.status === 'True')?.type
        if (current && seen.at(-1) !== current) seen.push(current)
        if (current === 'Succeeded' || current === 'Failed') svm = object
      },
      onError: (err) => t.comment(`StorageVersionMigration watch: ${String(err)}`),
    },
    stop.signal,
  )
  const controller = new KsvmMigrationController({
    http,
    config: ConfigSchema.parse({ migrator: { storageVersionMigrations: true } }),
    logger: pino({ level: 'silent' }),
    owner: 'test',
    lock: new RunLock(),
    onResult: (_svm, r) => (result = r),
  })
  const controlling = controller.run(stop.signal)
  t.teardown(async () => {
    stop.abort()
    await Promise.all([controlling, watching])
  })

  await http.request({
    method: 'POST',
    path: KSVM_API,
    body: storageVersionMigration({ name }, { group: '', version: 'v1', resource: 'secrets' }),
  })
  const finished = await until(
    `StorageVersionMigration ${name} to finish (the conditions seen last)`,
    60_000,
    async () => ({ svm, seen }),
    (v) => v.svm !== undefined,
    { everyMs: 50 },
  )
  t.comment(`StorageVersionMigration finished after ${elapsed()}`)
  t.same(seen, ['Running', 'Succeeded'], 'the object showed Running, then Succeeded')
  t.match(
    finished.svm?.status?.conditions,
    [{ type: 'Succeeded', status: 'True', reason: 'Succeeded' }],
    'one current condition: Succeeded',
  )
  t.match(result?.storage?.counts, { seen: COUNT + 1, rewritten: COUNT, current: 1, failed: 0 }, 'the 60 Secrets read with key2 rewritten')

  const stored = await storedSecrets()
  t.same(notUnder(stored, key3), [], 'every value in etcd starts with k8s:enc:aescbc:v1:key3:')
  t.same(await keyCounts(stored), { key3: COUNT + 1 }, 'none under key2')
  const api = await secretsThroughApi()
  t.same([...stored.keys()].sort(), [...api.keys()].map((k) => `${SECRETS}${k}`).sort(), 'etcd holds exactly the Secrets the API lists')
  t.same(
    Object.fromEntries([...created.keys()].map((k) => [k, api.get(k)])),
    Object.fromEntries(created),
    'every Secret reads back with the data it was created with',
  )
})
