/**
 * Every error raised on purpose, with a stable code users search for (CLI line, last-result
 * annotation, Events, `err.code` in logs), in one table as fastify's lib/errors.js. Foreign
 * errors are CRDM_INTERNAL unless wrapped here with a cause.
 */

export const ERROR_CODES = {
  CRDM_CONFIG_INVALID: 'invalid configuration',
  /** No cluster to talk to: no kubeconfig, or one without a current context. */
  CRDM_KUBECONFIG: 'no usable kubeconfig',
  /** Connection refused, a name that does not resolve, a connect timeout. */
  CRDM_UNREACHABLE: 'API server unreachable',
  /** A certificate not trusted, not covering the name, or expired. */
  CRDM_TLS: 'TLS failure',
  /** The API server did not accept the credentials (401). */
  CRDM_UNAUTHORIZED: 'credentials refused',
  /** The API server did not answer a request within --request-timeout. */
  CRDM_REQUEST_TIMEOUT: 'request timed out',
  /** The API server refused the request to the user (403: RBAC or admission). */
  CRDM_FORBIDDEN: 'forbidden',
  /** The checkpoint-sealing key cannot be read or is too short. */
  CRDM_STATE_KEY: 'unusable state key',
  CRDM_LABEL_SELECTOR: 'invalid label selector',
  /** The webhook was sent something that is not an AdmissionReview it can answer. */
  CRDM_REVIEW_MALFORMED: 'malformed AdmissionReview',
  CRDM_CERTIFICATE: 'unusable serving certificate',
  CRDM_KUBE_API: 'Kubernetes API error',
  /** The API server did not start writing the new storage version in time. */
  CRDM_STORAGE_NOT_SWITCHED: 'storage version not switched',
  /** Some objects could not be rewritten or cleaned; the others were. */
  CRDM_OBJECTS_FAILED: 'objects failed',
  /** The CRD's conversion webhook did not answer (before the freeze, or longer than the outage limit during a run). */
  CRDM_CONVERSION_OUTAGE: 'conversion webhook unavailable',
  /** The conversion webhook refused to convert some objects; the others were migrated. */
  CRDM_CONVERSION_REFUSED: 'conversion refused',
  /** A stashed copy could not be migrated (no referrer, a referrer changed meanwhile, a name taken); nothing half-done. */
  CRDM_STASH_FAILED: 'stashed copy not migrated',
  /** The resource to migrate does not exist or is not served. */
  CRDM_RESOURCE_NOT_FOUND: 'resource not found',
  /** engine builtin: the API server serves no storagemigration.k8s.io, or kube-controller-manager did not start the migration in time. */
  CRDM_BUILTIN_UNAVAILABLE: 'built-in storage version migrator unavailable',
  /** engine builtin: the built-in StorageVersionMigration failed or was deleted. */
  CRDM_BUILTIN_FAILED: 'built-in storage version migration failed',
  /** Rewriting would lose, change or add content (a narrowed schema, an unfaithful conversion webhook): nothing written. */
  CRDM_DATA_LOSS: 'rewrite would change data',
  /** The CRD's storage version or generation changed under the freeze. */
  CRDM_CRD_CHANGED: 'CRD changed during the migration',
  /** Someone else (a break-glass user) removed the migrating annotation while the run held it; the run stopped. */
  CRDM_FREEZE_LIFTED: 'freeze lifted during the migration',
  /** Another instance took the freeze over (our heartbeat went unseen too long); the run left it to it. */
  CRDM_FREEZE_TAKEN_OVER: 'freeze taken over during the migration',
  /** The run ended but its freeze could not be lifted (lost `patch`, or refusals): the CRD stays frozen. */
  CRDM_UNFREEZE_FAILED: 'freeze not lifted',
  /** The run was stopped (shutdown, leadership lost, Ctrl-C). */
  CRDM_ABORTED: 'stopped',
  CRDM_WEBHOOK_CONFIG: 'invalid webhook configuration options',
  /** A bug: something that should not happen did. */
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

/** The code of any error: ours, an abort, or CRDM_INTERNAL. */
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
