/**
 * The API server's custom resource conversion, seen from outside. A webhook failure is a 500
 * `conversion webhook for <gv, Kind=...> failed: ` (webhook_converter.go) then either the HTTP
 * client's error, an outage the run waits out, or the webhook's `Failure`, a refusal of those objects.
 */
import { CrdMigratorError } from '../errors.js'
import { sanitizeText } from '../sanitize.js'
import { KubeApiError } from './api-errors.js'
import type { CustomResourceDefinition, ManagedFieldsEntry } from './types.js'

export type ConversionStrategy = 'None' | 'Webhook'

export interface WebhookClientConfig {
  url?: string
  caBundle?: string
  service?: { namespace?: string; name?: string; port?: number; path?: string }
}

interface CrdConversion {
  strategy?: string
  webhook?: { clientConfig?: WebhookClientConfig; conversionReviewVersions?: string[] }
  /** apiextensions v1beta1 spelling, still accepted on read. */
  webhookClientConfig?: WebhookClientConfig
  conversionReviewVersions?: string[]
}

export function conversionStrategy(crd: CustomResourceDefinition): ConversionStrategy {
  return (crd.spec.conversion as CrdConversion | undefined)?.strategy === 'Webhook' ? 'Webhook' : 'None'
}

/** The CRD's conversion webhook (where, and which ConversionReview versions it speaks); undefined with strategy None. */
export function conversionWebhookConfig(
  crd: CustomResourceDefinition,
): { clientConfig: WebhookClientConfig; reviewVersions: string[] } | undefined {
  if (conversionStrategy(crd) !== 'Webhook') return undefined
  const conversion = crd.spec.conversion as CrdConversion
  return {
    clientConfig: conversion.webhook?.clientConfig ?? conversion.webhookClientConfig ?? {},
    reviewVersions: conversion.webhook?.conversionReviewVersions ?? conversion.conversionReviewVersions ?? ['v1'],
  }
}

/** `service <ns>/<name>:<port><path>` or its URL; undefined with strategy None. */
export function conversionWebhookOf(crd: CustomResourceDefinition): string | undefined {
  const config = conversionWebhookConfig(crd)?.clientConfig
  if (!config) return undefined
  if (config.url) return config.url
  const svc = config.service
  if (svc?.name) return `service ${svc.namespace ?? 'default'}/${svc.name}:${svc.port ?? 443}${svc.path ?? ''}`
  return 'an unnamed webhook'
}

export type ConversionFailureKind = 'outage' | 'refused'

export interface ConversionFailure {
  kind: ConversionFailureKind
  /** What came after `failed: `: the HTTP client's error or the webhook's message, cleaned and cut (sanitize.ts). */
  detail: string
}

const PREFIX = /conversion webhook for .+? failed: /s

/** client-go HTTP client errors and apimachinery's 5xx/429 StatusError texts: never the webhook's conversion code. */
const OUTAGE_DETAIL =
  /^(Post "|Post https?:|dial tcp|x509:|tls:|EOF$|context deadline exceeded|net\/http:|an error on the server|the server is currently unable|the server has asked for the client to try again|the server was unable to return a response|the server could not find the requested resource|service "[^"]*" not found|no endpoints available|Internal error occurred: failed calling webhook)/

/** A write answered without the managedFields it set: the API server could not convert them (webhook down), dropped them all. An outage. */
export class ManagedFieldsDroppedError extends CrdMigratorError {
  override readonly name = 'ManagedFieldsDroppedError'

  constructor(
    readonly key: string,
    readonly entries: ManagedFieldsEntry[],
  ) {
    super('CRDM_CONVERSION_OUTAGE', `the API server stored ${key} without its managedFields (it could not convert them)`)
  }
}

/** The conversion failure inside an API error, or undefined when it is something else. */
export function classifyConversionError(err: unknown): ConversionFailure | undefined {
  if (err instanceof ManagedFieldsDroppedError) return { kind: 'outage', detail: err.message }
  if (!(err instanceof KubeApiError) || err.status < 500) return undefined
  const match = PREFIX.exec(err.message)
  if (!match) return undefined
  const detail = sanitizeText(err.message.slice(match.index + match[0].length))
  return { kind: OUTAGE_DETAIL.test(detail) ? 'outage' : 'refused', detail }
}

export const isConversionOutage = (err: unknown): boolean => classifyConversionError(err)?.kind === 'outage'
export const isConversionRefusal = (err: unknown): boolean => classifyConversionError(err)?.kind === 'refused'
