/**
 * The cheap-answer API server of `npm run bench:client` (client-ceiling.ts), in a process
 * of its own so that its CPU is not the client's: one namespaced custom resource
 * (widgets.bench.example.com/v1), HTTPS keep-alive, answering only what the storage phase
 * sends (src/kube/list-metadata.ts, src/migrator/phases/object-writes.ts):
 *
 * - GET /apis/bench.example.com/v1/widgets?limit=&continue= with the metadata-only Accept:
 *   a PartialObjectMetadataList page, in list-key order (namespace/name), each page's JSON
 *   built once and reused;
 * - PATCH /apis/bench.example.com/v1/namespaces/NS/widgets/NAME, a JSON merge patch carrying
 *   the object's uid (and resourceVersion), metadata-only Accept: the object's
 *   PartialObjectMetadata with a new resourceVersion (the outcome is then `rewritten`);
 * - anything else: a 404 Status, and a request of the right path in the wrong shape a 406
 *   or 422, counted, so a product that sends something else fails the run loudly.
 *
 * Started by client-ceiling.ts with IPC: `{objects}` in argv[2]; it sends `{url, caCertFile}`
 * when listening, answers `{op: 'reset'}` and `{op: 'stats'}` with {@link StubStats}, and
 * exits on SIGTERM or when the parent goes.
 */
import { createServer, type ServerOptions } from 'node:https'
import { mkdtemp, readFile, rm } from 'node:fs/promises'
import type { IncomingMessage, ServerResponse } from 'node:http'
import os from 'node:os'
import path from 'node:path'
import { generateDevCertificates } from '../certs/devcerts.js'

import { STUB_GROUP, STUB_PLURAL, STUB_VERSION, type StubStats } from './client-ceiling-resource.js'

const NAMESPACES = ['bench-a', 'bench-b', 'bench-c', 'bench-d']
const COLLECTION = `/apis/${STUB_GROUP}/${STUB_VERSION}/${STUB_PLURAL}`
const OBJECT = new RegExp(`^/apis/${STUB_GROUP}/${STUB_VERSION}/namespaces/([^/]+)/${STUB_PLURAL}/([^/?]+)$`)
const LIST_RV = '1000'

interface StubObject {
  key: string
  namespace: string
  name: string
  uid: string
  /** The object's PartialObjectMetadata as JSON, split where the resourceVersion goes. */
  before: string
  after: string
}

/** A uid of the object's number, shaped like a real one. */
function uidOf(i: number): string {
  const hex = i.toString(16).padStart(12, '0')
  return `00000000-0000-4000-8000-${hex}`
}

/** The objects in list-key order, each one's metadata (as a real CR created by a client carries it). */
function buildObjects(count: number): StubObject[] {
  const objects: StubObject[] = []
  for (let i = 0; i < count; i++) {
    const namespace = NAMESPACES[i % NAMESPACES.length]!
    const name = `w-${String(i).padStart(6, '0')}`
    const metadata = {
      name,
      namespace,
      uid: uidOf(i),
      resourceVersion: '\u0000',
      generation: 1,
      creationTimestamp: '2026-11-26T10:00:00Z',
      labels: { app: `app-${i % 50}`, 'app.kubernetes.io/managed-by': 'bench' },
      managedFields: [
        {
          manager: 'bench',
          operation: 'Update',
          apiVersion: `${STUB_GROUP}/${STUB_VERSION}`,
          time: '2026-11-26T10:00:00Z',
          fieldsType: 'FieldsV1',
          fieldsV1: {
            'f:metadata': { 'f:labels': { '.': {}, 'f:app': {}, 'f:app.kubernetes.io/managed-by': {} } },
            'f:spec': {
              '.': {},
              'f:env': {},
              'f:image': {},
              'f:ports': {},
              'f:replicas': {},
              'f:resources': { '.': {}, 'f:cpu': {}, 'f:memory': {} },
              'f:tier': {},
            },
          },
        },
      ],
    }
    const json = JSON.stringify({ kind: 'PartialObjectMetadata', apiVersion: 'meta.k8s.io/v1', metadata })
    const [before, after] = json.split('\\u0000') as [string, string]
    objects.push({ key: `${namespace}/${name}`, namespace, name, uid: metadata.uid, before, after })
  }
  return objects.sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0))
}

function status(res: ServerResponse, code: number, reason: string, message: string): void {
  const body = JSON.stringify({ kind: 'Status', apiVersion: 'v1', metadata: {}, status: 'Failure', message, reason, code })
  res.writeHead(code, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) }).end(body)
}

function json(res: ServerResponse, body: string): void {
  res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) }).end(body)
}

async function main(): Promise<void> {
  const count = Number(process.argv[2])
  if (!Number.isInteger(count) || count < 1) throw new Error(`usage: client-ceiling-stub.js OBJECTS (got ${process.argv[2]})`)
  const objects = buildObjects(count)
  const index = new Map(objects.map((o, i) => [o.key, i]))
  // Each object's listed resourceVersion; a patch moves it to a new one.
  const rv = objects.map((_, i) => String(10_000 + i))
  let nextRv = 10_000 + count
  const patched = new Uint8Array(count)
  const stats: Omit<StubStats, 'cpuMs'> = { listPages: 0, patches: 0, distinctPatched: 0, refused: 0, refusedSamples: [] }

  const refuse = (req: IncomingMessage, res: ServerResponse, code: number, reason: string, why: string) => {
    stats.refused++
    if (stats.refusedSamples.length < 5) stats.refusedSamples.push(`${req.method} ${req.url}: ${why}`)
    status(res, code, reason, why)
  }

  /**
   * A page from `start`, `limit` objects: the objects' JSON is built once, only their
   * current resourceVersions go in per request (a page asked again after writes, e.g. a
   * retried one, shows them as the API server would).
   */
  const page = (start: number, limit: number): string => {
    const end = Math.min(count, start + limit)
    const items: string[] = []
    for (let i = start; i < end; i++) items.push(objects[i]!.before + rv[i]! + objects[i]!.after)
    const metadata =
      end < count
        ? `{"resourceVersion":"${LIST_RV}","continue":"${Buffer.from(String(end)).toString('base64')}","remainingItemCount":${count - end}}`
        : `{"resourceVersion":"${LIST_RV}"}`
    return `{"kind":"PartialObjectMetadataList","apiVersion":"meta.k8s.io/v1","metadata":${metadata},"items":[${items.join(',')}]}`
  }

  const list = (req: IncomingMessage, res: ServerResponse, query: URLSearchParams) => {
    if (!req.headers.accept?.includes('as=PartialObjectMetadataList'))
      return refuse(req, res, 406, 'NotAcceptable', 'not a metadata-only list')
    const limit = Number(query.get('limit') ?? count)
    const token = query.get('continue')
    const start = token ? Number(Buffer.from(token, 'base64').toString('utf8')) : 0
    if (!Number.isInteger(limit) || limit < 1 || !Number.isInteger(start) || start < 0 || start > count)
      return refuse(req, res, 400, 'BadRequest', 'bad limit or continue')
    stats.listPages++
    json(res, page(start, limit))
  }

  const patch = (req: IncomingMessage, res: ServerResponse, body: string, namespace: string, name: string) => {
    const i = index.get(`${namespace}/${name}`)
    if (i === undefined) return refuse(req, res, 404, 'NotFound', `widgets.${STUB_GROUP} "${name}" not found`)
    const o = objects[i]!
    if (req.headers['content-type'] !== 'application/merge-patch+json')
      return refuse(req, res, 415, 'UnsupportedMediaType', 'not a merge patch')
    if (!req.headers.accept?.includes('as=PartialObjectMetadata')) return refuse(req, res, 406, 'NotAcceptable', 'not metadata-only')
    // The no-op write's preconditions: the uid and the resourceVersion it listed.
    if (!body.includes(`"uid":"${o.uid}"`) || !body.includes(`"resourceVersion":"${rv[i]}"`))
      return refuse(req, res, 409, 'Conflict', 'precondition failed: uid or resourceVersion')
    rv[i] = String(nextRv++)
    stats.patches++
    if (!patched[i]) {
      patched[i] = 1
      stats.distinctPatched++
    }
    json(res, o.before + rv[i] + o.after)
  }

  const dir = await mkdtemp(path.join(os.tmpdir(), 'crd-migrator-client-ceiling-'))
  const certs = await generateDevCertificates(dir, { extraHosts: ['127.0.0.1'] })
  const tls: ServerOptions = { cert: await readFile(certs.certFile), key: await readFile(certs.keyFile), minVersion: 'TLSv1.2' }
  const server = createServer(tls, (req, res) => {
    const url = req.url ?? '/'
    const q = url.indexOf('?')
    const pathname = q < 0 ? url : url.slice(0, q)
    if (req.method === 'GET' && pathname === COLLECTION) return list(req, res, new URLSearchParams(q < 0 ? '' : url.slice(q + 1)))
    const match = req.method === 'PATCH' ? OBJECT.exec(pathname) : null
    if (!match) {
      req.resume()
      return refuse(req, res, 404, 'NotFound', 'the stub answers only the storage phase')
    }
    const chunks: Buffer[] = []
    req.on('data', (c: Buffer) => chunks.push(c))
    req.on('end', () => patch(req, res, Buffer.concat(chunks).toString('utf8'), match[1]!, match[2]!))
  })
  server.keepAliveTimeout = 120_000
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address() as { port: number }

  const report = (): StubStats => {
    const cpu = process.cpuUsage()
    return { cpuMs: (cpu.user + cpu.system) / 1000, ...stats, refusedSamples: [...stats.refusedSamples] }
  }
  process.on('message', (m: { op?: string }) => {
    if (m.op === 'reset') {
      // Each run starts from the objects as listed first: resourceVersions and counts back.
      for (let i = 0; i < count; i++) rv[i] = String(10_000 + i)
      nextRv = 10_000 + count
      patched.fill(0)
      Object.assign(stats, { listPages: 0, patches: 0, distinctPatched: 0, refused: 0, refusedSamples: [] })
    }
    process.send?.({ op: m.op, stats: report() })
  })
  const stop = async () => {
    server.close()
    server.closeAllConnections()
    await rm(dir, { recursive: true, force: true })
    process.exit(0)
  }
  process.on('SIGTERM', () => void stop())
  process.on('disconnect', () => void stop())
  process.send?.({ url: `https://127.0.0.1:${port}`, caCertFile: certs.caCertFile })
}

try {
  await main()
} catch (err) {
  process.stderr.write(`client-ceiling stub: ${err instanceof Error ? err.stack : String(err)}\n`)
  process.exit(1)
}
