/**
 * Converts objects the way the API server does for a CRD, for objects the API server
 * never sees as custom resources (copies stashed inside other objects): strategy None
 * only changes apiVersion; Webhook sends a ConversionReview to the CRD's conversion
 * webhook, trusting its caBundle, as kube-apiserver would.
 */
import { randomUUID } from 'node:crypto'
import https from 'node:https'
import { CrdMigratorError } from '../errors.js'
import { conversionWebhookConfig, type WebhookClientConfig } from './conversion.js'
import type { CustomResourceDefinition } from './types.js'

type Obj = Record<string, unknown>

/** Where kube-apiserver would send the ConversionReview: the URL, or the Service's in-cluster name. */
export function conversionWebhookUrl(config: WebhookClientConfig): URL {
  if (config.url) return new URL(config.url)
  const svc = config.service
  if (!svc?.name) throw new CrdMigratorError('CRDM_CONVERSION_OUTAGE', 'the CRD names no conversion webhook')
  return new URL(`https://${svc.name}.${svc.namespace ?? 'default'}.svc:${svc.port ?? 443}${svc.path ?? ''}`)
}

export async function convertObjects(crd: CustomResourceDefinition, objects: Obj[], version: string, timeoutMs = 10_000): Promise<Obj[]> {
  const desiredAPIVersion = `${crd.spec.group}/${version}`
  const webhook = conversionWebhookConfig(crd)
  if (!webhook) return objects.map((o) => ({ ...o, apiVersion: desiredAPIVersion }))
  const config = webhook.clientConfig
  const url = conversionWebhookUrl(config)
  const reviewVersion = webhook.reviewVersions.includes('v1') ? 'v1' : 'v1beta1'
  const uid = randomUUID()
  const review = {
    apiVersion: `apiextensions.k8s.io/${reviewVersion}`,
    kind: 'ConversionReview',
    request: { uid, desiredAPIVersion, objects },
  }
  const answer = await post(url, config.caBundle, review, timeoutMs)
  const response = (answer as { response?: { uid?: string; result?: { status?: string; message?: string }; convertedObjects?: Obj[] } })
    .response
  if (!response) throw refused(url, 'the webhook answered no response')
  if (reviewVersion === 'v1' && response.uid !== uid) throw refused(url, `expected response.uid=${uid}, got ${response.uid}`)
  if (response.result?.status !== 'Success') throw refused(url, response.result?.message || `status ${response.result?.status}`)
  const converted = response.convertedObjects ?? []
  if (converted.length !== objects.length) throw refused(url, `returned ${converted.length} objects, expected ${objects.length}`)
  for (const o of converted)
    if (o['apiVersion'] !== desiredAPIVersion)
      throw refused(url, `returned an object at ${String(o['apiVersion'])}, not ${desiredAPIVersion}`)
  return converted
}

function refused(url: URL, message: string): CrdMigratorError {
  return new CrdMigratorError('CRDM_CONVERSION_REFUSED', `conversion webhook ${url.href} refused: ${message}`)
}

function post(url: URL, caBundle: string | undefined, body: unknown, timeoutMs: number): Promise<unknown> {
  const payload = Buffer.from(JSON.stringify(body))
  return new Promise((resolve, reject) => {
    const req = https.request(
      url,
      {
        method: 'POST',
        headers: { 'Content-Type': 'application/json', Accept: 'application/json', 'Content-Length': payload.length },
        // Without a caBundle kube-apiserver trusts the system roots; so does this.
        ...(caBundle ? { ca: Buffer.from(caBundle, 'base64').toString('utf8') } : {}),
        timeout: timeoutMs,
        // A connection per review: stashes are few, and a pooled socket the webhook closed meanwhile would fail the review.
        agent: false,
      },
      (res) => {
        const chunks: Buffer[] = []
        res.on('data', (c: Buffer) => chunks.push(c))
        res.on('error', reject)
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString('utf8')
          if ((res.statusCode ?? 0) >= 300) return reject(unavailable(url, `HTTP ${res.statusCode}: ${text.slice(0, 200)}`))
          try {
            resolve(JSON.parse(text))
          } catch {
            reject(unavailable(url, 'the answer is not JSON'))
          }
        })
      },
    )
    req.on('timeout', () => req.destroy(unavailable(url, `no answer within ${timeoutMs} ms`)))
    req.on('error', (err) => reject(err instanceof CrdMigratorError ? err : unavailable(url, err.message)))
    req.end(payload)
  })
}

function unavailable(url: URL, message: string): CrdMigratorError {
  return new CrdMigratorError('CRDM_CONVERSION_OUTAGE', `conversion webhook ${url.href}: ${message}`)
}
