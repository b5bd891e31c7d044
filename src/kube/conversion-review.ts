/** Converts, as the API server would for a CRD, objects it never sees as custom resources (copies stashed inside other objects). */
import { randomUUID } from 'node:crypto'
import { urlToHttpOptions } from 'node:url'
import { CrdMigratorError } from '../errors.js'
import { sanitizeText } from '../sanitize.js'
import { conversionWebhookConfig, type WebhookClientConfig } from './conversion.js'
import { roundTrip } from './transport.js'
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

/** The webhook's words are not ours: cleaned and cut (sanitize.ts). */
function refused(url: URL, message: string): CrdMigratorError {
  return new CrdMigratorError('CRDM_CONVERSION_REFUSED', `conversion webhook ${url.href} refused: ${sanitizeText(message)}`)
}

/** As kube-apiserver sends it: no credentials, no proxy. No pooling: calls are few, and a socket the webhook closed would fail one. */
async function post(url: URL, caBundle: string | undefined, body: unknown, timeoutMs: number): Promise<unknown> {
  const payload = Buffer.from(JSON.stringify(body))
  const answer = await roundTrip(
    {
      ...urlToHttpOptions(url),
      method: 'POST',
      headers: { 'Content-Type': 'application/json', Accept: 'application/json', 'Content-Length': payload.length },
      // Trusted as kube-apiserver does: its caBundle, else the system roots; nothing of the kubeconfig.
      ...(caBundle ? { ca: Buffer.from(caBundle, 'base64').toString('utf8') } : {}),
      timeout: timeoutMs,
      agent: false,
    },
    payload,
    {
      timedOut: () => unavailable(url, `no answer within ${timeoutMs} ms`),
      explain: (err) => (err instanceof CrdMigratorError ? err : unavailable(url, err.message)),
    },
  )
  if (answer.status >= 300) throw unavailable(url, `HTTP ${answer.status}: ${sanitizeText(answer.text, 200)}`)
  try {
    return JSON.parse(answer.text)
  } catch {
    throw unavailable(url, 'the answer is not JSON')
  }
}

function unavailable(url: URL, message: string): CrdMigratorError {
  return new CrdMigratorError('CRDM_CONVERSION_OUTAGE', `conversion webhook ${url.href}: ${message}`)
}
