/**
 * A small HTTPS conversion webhook (apiextensions.k8s.io/v1 ConversionReview) for the
 * shapes in shapes.ts, owned by the tests, the demo and the bench. It has its own dev CA
 * (caBundle for the CRD) and can be told to go down (connections refused), to answer
 * 503, to be slow, and to refuse chosen objects, so the migrator can be proven on the
 * path that fails in real upgrades.
 */
import { mkdtemp, rm } from 'node:fs/promises'
import https from 'node:https'
import type { AddressInfo, Socket } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { generateDevCertificates } from '../certs/devcerts.js'
import { convertObject } from './shapes.js'

export type WebhookMode = 'up' | 'down' | 'error'

export interface ConversionStats {
  /** ConversionReviews answered (Success or Failure), refused connections not counted. */
  reviews: number
  /** Objects in those reviews. */
  objects: number
  /** Reviews answered with Failure because they held a refused object. */
  refusals: number
  /** Reviews by `from→to` (e.g. `v1→v2`). */
  byDirection: Record<string, number>
}

export interface ConversionWebhook {
  /** `https://127.0.0.1:<port>/convert` */
  readonly url: string
  /** Base64 PEM of the CA that signed the serving certificate. */
  readonly caBundle: string
  /** The CRD's `spec.conversion` pointing at this webhook. */
  conversion(): Record<string, unknown>
  readonly stats: ConversionStats
  resetStats(): void
  /** `down` closes the listener (connection refused); `error` answers 503. */
  setMode(mode: WebhookMode): Promise<void>
  readonly mode: WebhookMode
  /** Delay before each answer. */
  setDelay(ms: number): void
  /**
   * Changes every converted object after the faithful conversion (an unfaithful webhook:
   * content injected or dropped); none restores the faithful one.
   */
  tamper(change?: (converted: Record<string, unknown>, desiredApiVersion: string) => Record<string, unknown>): void
  /** Objects (by name) whose conversion the webhook refuses with `Failure` and this message. */
  refuse(names: Iterable<string>, message?: string): void
  stop(): Promise<void>
}

interface ConversionReview {
  apiVersion?: string
  kind?: string
  request?: { uid: string; desiredAPIVersion: string; objects: Array<Record<string, unknown>> }
}

export async function startConversionWebhook(options: { port?: number } = {}): Promise<ConversionWebhook> {
  const dir = await mkdtemp(join(tmpdir(), 'crd-migrator-conversion-'))
  const certs = await generateDevCertificates(dir, { serviceName: 'conversion-webhook', namespace: 'default' })
  const stats: ConversionStats = { reviews: 0, objects: 0, refusals: 0, byDirection: {} }
  let mode: WebhookMode = 'up'
  let delayMs = 0
  const refused = new Map<string, string>()
  let tampered: ((converted: Record<string, unknown>, desiredApiVersion: string) => Record<string, unknown>) | undefined
  const sockets = new Set<Socket>()

  const server = https.createServer({ key: certs.keyPem, cert: certs.certPem }, (req, res) => {
    const chunks: Buffer[] = []
    req.on('data', (c: Buffer) => chunks.push(c))
    req.on('end', () => {
      void (async () => {
        if (delayMs > 0) await sleep(delayMs)
        if (mode === 'error') {
          res.writeHead(503, { 'content-type': 'text/plain' }).end('conversion webhook unavailable')
          return
        }
        let review: ConversionReview
        try {
          review = JSON.parse(Buffer.concat(chunks).toString('utf8')) as ConversionReview
        } catch {
          res.writeHead(400).end('not JSON')
          return
        }
        const request = review.request
        if (!request) {
          res.writeHead(400).end('no request')
          return
        }
        stats.reviews++
        stats.objects += request.objects.length
        const to = request.desiredAPIVersion.slice(request.desiredAPIVersion.lastIndexOf('/') + 1)
        for (const o of request.objects) {
          const from = String(o['apiVersion']).slice(String(o['apiVersion']).lastIndexOf('/') + 1)
          const direction = `${from}→${to}`
          stats.byDirection[direction] = (stats.byDirection[direction] ?? 0) + 1
        }
        const refusedObject = request.objects.find((o) => refused.has(String((o['metadata'] as { name?: unknown } | undefined)?.name)))
        let response: Record<string, unknown>
        if (refusedObject) {
          stats.refusals++
          const name = String((refusedObject['metadata'] as { name: string }).name)
          response = { uid: request.uid, result: { status: 'Failure', message: `${refused.get(name)} (object ${name})` } }
        } else {
          try {
            response = {
              uid: request.uid,
              result: { status: 'Success' },
              convertedObjects: request.objects.map((o) => {
                const converted = convertObject(o, request.desiredAPIVersion)
                return tampered ? tampered(converted, request.desiredAPIVersion) : converted
              }),
            }
          } catch (err) {
            response = { uid: request.uid, result: { status: 'Failure', message: (err as Error).message } }
          }
        }
        res
          .writeHead(200, { 'content-type': 'application/json' })
          .end(JSON.stringify({ apiVersion: 'apiextensions.k8s.io/v1', kind: 'ConversionReview', response }))
      })()
    })
  })
  server.on('connection', (s: Socket) => {
    sockets.add(s)
    s.on('close', () => sockets.delete(s))
  })

  const listen = (port: number) =>
    new Promise<number>((resolve, reject) => {
      server.once('error', reject)
      server.listen(port, '127.0.0.1', () => {
        server.off('error', reject)
        resolve((server.address() as AddressInfo).port)
      })
    })
  const close = () =>
    new Promise<void>((resolve) => {
      if (!server.listening) return resolve()
      server.close(() => resolve())
      // Established keep-alive connections would keep answering: a webhook that is down answers nobody.
      for (const s of sockets) s.destroy()
    })

  const port = await listen(options.port ?? 0)
  const url = `https://127.0.0.1:${port}/convert`
  const caBundle = Buffer.from(certs.caCertPem).toString('base64')
  return {
    url,
    caBundle,
    conversion: () => ({
      strategy: 'Webhook',
      webhook: { conversionReviewVersions: ['v1'], clientConfig: { url, caBundle } },
    }),
    stats,
    resetStats() {
      Object.assign(stats, { reviews: 0, objects: 0, refusals: 0, byDirection: {} })
    },
    get mode() {
      return mode
    },
    async setMode(next) {
      if (next === 'down' && mode !== 'down') await close()
      if (next !== 'down' && mode === 'down') await listen(port)
      mode = next
    },
    setDelay(ms) {
      delayMs = ms
    },
    tamper(change) {
      tampered = change
    },
    refuse(names, message = 'refused by the test webhook') {
      refused.clear()
      for (const n of names) refused.set(n, message)
    },
    async stop() {
      await close()
      await rm(dir, { recursive: true, force: true })
    },
  }
}
