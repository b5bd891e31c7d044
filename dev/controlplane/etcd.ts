/**
 * The one etcd client of the tooling and the tests: etcd's v3 JSON gateway (`POST
 * /v3/kv/range` and friends on the client URL), which returns keys and values
 * base64-encoded, i.e. the exact stored bytes. No etcdctl process is spawned per read.
 */
import { request } from 'node:http'

interface RangeResponse {
  kvs?: Array<{ key: string; value?: string }>
  count?: string
}

function b64(s: string | Buffer): string {
  return Buffer.from(s).toString('base64')
}

/** The smallest key greater than every key that starts with `prefix` (etcd's `--prefix`). */
export function prefixRangeEnd(prefix: string | Buffer): Buffer {
  const end = Buffer.from(prefix)
  for (let i = end.length - 1; i >= 0; i--) {
    if (end[i]! < 0xff) {
      end[i] = end[i]! + 1
      return end.subarray(0, i + 1)
    }
  }
  return Buffer.from([0]) // "all keys"
}

/** POST of a JSON body to the gateway (e.g. `/v3/kv/put`, `/v3/kv/compaction`); the answer parsed. */
export function etcdPost<T>(endpoint: string, path: string, body: unknown, timeoutMs = 10_000): Promise<T> {
  const url = new URL(path, endpoint)
  const payload = JSON.stringify(body)
  return new Promise<T>((resolve, reject) => {
    const req = request(
      url,
      {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(payload) },
        timeout: timeoutMs,
      },
      (res) => {
        const chunks: Buffer[] = []
        res.on('data', (c: Buffer) => chunks.push(c))
        res.on('error', reject)
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString('utf8')
          if (res.statusCode !== 200) {
            reject(new Error(`etcd ${url.pathname}: HTTP ${res.statusCode}: ${text.slice(0, 500)}`))
            return
          }
          try {
            resolve(JSON.parse(text) as T)
          } catch (err) {
            reject(err)
          }
        })
      },
    )
    req.on('timeout', () => req.destroy(new Error(`etcd ${url.pathname}: timed out after ${timeoutMs}ms`)))
    req.on('error', reject)
    req.end(payload)
  })
}

/** Raw stored bytes of `key`, or null when the key does not exist. */
export async function etcdGet(endpoint: string, key: string): Promise<Buffer | null> {
  const res = await etcdPost<RangeResponse>(endpoint, '/v3/kv/range', { key: b64(key) })
  const kv = res.kvs?.[0]
  if (!kv) return null
  return Buffer.from(kv.value ?? '', 'base64')
}

/** All keys starting with `prefix`, sorted ascending. */
export async function etcdListKeys(endpoint: string, prefix: string): Promise<string[]> {
  const res = await etcdPost<RangeResponse>(endpoint, '/v3/kv/range', {
    key: b64(prefix),
    range_end: prefixRangeEnd(prefix).toString('base64'),
    keys_only: true,
    sort_order: 'ASCEND',
    sort_target: 'KEY',
  })
  return (res.kvs ?? []).map((kv) => Buffer.from(kv.key, 'base64').toString('utf8'))
}

/**
 * The stored values of every key starting with `prefix`, in key order, `limit` per page
 * (one page per yield), so a large resource is never held in memory whole.
 */
export async function* etcdRangeValues(endpoint: string, prefix: string, limit = 1000): AsyncGenerator<Buffer[]> {
  const end = prefixRangeEnd(prefix).toString('base64')
  let from = Buffer.from(prefix)
  for (;;) {
    const res = await etcdPost<RangeResponse & { more?: boolean }>(
      endpoint,
      '/v3/kv/range',
      {
        key: from.toString('base64'),
        range_end: end,
        limit,
        sort_order: 'ASCEND',
        sort_target: 'KEY',
      },
      60_000,
    )
    const kvs = res.kvs ?? []
    yield kvs.map((kv) => Buffer.from(kv.value ?? '', 'base64'))
    if (!res.more || kvs.length === 0) return
    // The next page starts right after the last key of this one.
    from = Buffer.concat([Buffer.from(kvs[kvs.length - 1]!.key, 'base64'), Buffer.from([0])])
  }
}

/** Resolves true when etcd's `/health` reports healthy. Never throws. */
export function etcdHealthy(endpoint: string, timeoutMs = 1_000): Promise<boolean> {
  return new Promise((resolve) => {
    const req = request(new URL('/health', endpoint), { timeout: timeoutMs }, (res) => {
      const chunks: Buffer[] = []
      res.on('data', (c: Buffer) => chunks.push(c))
      res.on('error', () => resolve(false))
      res.on('end', () => {
        if (res.statusCode !== 200) return resolve(false)
        try {
          resolve((JSON.parse(Buffer.concat(chunks).toString('utf8')) as { health?: string }).health === 'true')
        } catch {
          resolve(false)
        }
      })
    })
    req.on('timeout', () => req.destroy())
    req.on('error', () => resolve(false))
    req.end()
  })
}

/** etcd key under which the kube-apiserver stores a custom resource (default `/registry` prefix). */
export function customResourceKey(group: string, plural: string, namespace: string | undefined, name: string): string {
  return namespace ? `/registry/${group}/${plural}/${namespace}/${name}` : `/registry/${group}/${plural}/${name}`
}
