/**
 * Every error raised on purpose, with a stable code users search for (CLI line, last-result
 * annotation, Events, `err.code` in logs), in one table as fastify's lib/errors.js. Foreign
 * errors are CRDM_INTERNAL unless wrapped here with a cause. What each code means and its fix:
 * docs/troubleshooting.md#errors, one row per code.
 */

export const ERROR_CODES = {
  CRDM_CONFIG_INVALID: 'invalid configuration',
  CRDM_KUBECONFIG: 'no usable kubeconfig',
  CRDM_UNREACHABLE: 'API server unreachable',
  CRDM_TLS: 'TLS failure',
  CRDM_UNAUTHORIZED: 'credentials refused',
  CRDM_REQUEST_TIMEOUT: 'request timed out',
  CRDM_FORBIDDEN: 'forbidden',
  CRDM_STATE_KEY: 'unusable state key',
  CRDM_LABEL_SELECTOR: 'invalid label selector',
  CRDM_REVIEW_MALFORMED: 'malformed AdmissionReview',
  CRDM_CERTIFICATE: 'unusable serving certificate',
  CRDM_KUBE_API: 'Kubernetes API error',
  CRDM_STORAGE_NOT_SWITCHED: 'storage version not switched',
  CRDM_OBJECTS_FAILED: 'objects failed',
  CRDM_CONVERSION_OUTAGE: 'conversion webhook unavailable',
  CRDM_CONVERSION_REFUSED: 'conversion refused',
  CRDM_STASH_FAILED: 'stashed copy not migrated',
  CRDM_RESOURCE_NOT_FOUND: 'resource not found',
  CRDM_BUILTIN_UNAVAILABLE: 'built-in storage version migrator unavailable',
  CRDM_BUILTIN_FAILED: 'built-in storage version migration failed',
  CRDM_DATA_LOSS: 'rewrite would change data',
  CRDM_CRD_CHANGED: 'CRD changed during the migration',
  CRDM_FREEZE_LIFTED: 'freeze lifted during the migration',
  CRDM_FREEZE_TAKEN_OVER: 'freeze taken over during the migration',
  CRDM_UNFREEZE_FAILED: 'freeze not lifted',
  CRDM_ABORTED: 'stopped',
  CRDM_WEBHOOK_CONFIG: 'invalid webhook configuration options',
  CRDM_INTERNAL: 'internal error',
} as const

export type ErrorCode = keyof typeof ERROR_CODES

export class CrdMigratorError extends Error {
  override readonly name: string = 'CrdMigratorError'

  constructor(
    readonly code: ErrorCode,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options)
  }
}

/** A run stopped by SIGINT or SIGTERM (exit 130 or 143): what the process is told, not a failure to explain. */
export class InterruptedError extends CrdMigratorError {
  override readonly name: string = 'InterruptedError'

  constructor(readonly signal: NodeJS.Signals) {
    super('CRDM_ABORTED', `interrupted by ${signal}`)
  }
}

/** The InterruptedError behind an error, if any: an aborted request carries it as its cause. */
export function interruption(err: unknown): InterruptedError | undefined {
  for (let e = err, depth = 0; e instanceof Error && depth < 5; e = e.cause, depth++) if (e instanceof InterruptedError) return e
  return undefined
}

/** From a file, env or flag alike; the message names the field and where its value came from. */
export class ConfigError extends CrdMigratorError {
  override readonly name: string = 'ConfigError'

  constructor(message: string, options?: { cause?: unknown }) {
    super('CRDM_CONFIG_INVALID', message, options)
  }
}

export function errorCode(err: unknown): ErrorCode {
  if (err instanceof CrdMigratorError) return err.code
  if (isAbort(err)) return 'CRDM_ABORTED'
  return 'CRDM_INTERNAL'
}

export function errorMessage(err: unknown): string {
  if (err instanceof Error) return err.message
  return typeof err === 'string' ? err : String(err)
}

/** "CODE: message", for the CLI, Events and the last-result annotation. */
export function describeError(err: unknown): string {
  return `${errorCode(err)}: ${errorMessage(err)}`
}

function isAbort(err: unknown): boolean {
  return err instanceof Error && (err.name === 'AbortError' || (err as { code?: unknown }).code === 'ABORT_ERR')
}
