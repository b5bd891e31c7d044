/**
 * Serving certificate loading and hot reload. The kubelet swaps a Secret's files by renaming
 * the ..data symlink, never tls.crt in place, so we watch the DIRECTORY and debounce; fs.watch
 * misses events and dies with its directory, so a slow poll re-reads and re-creates watchers.
 * A pair is applied only if consistent (files replaced one by one leave a mismatched window)
 * and valid now (clients refuse others); else the previous keeps serving. A not-yet-valid pair
 * (issuer clock skew) is retried when it becomes valid; an expiring pair in use keeps serving.
 */
import { X509Certificate, createPrivateKey } from 'node:crypto'
import { watch, type FSWatcher } from 'node:fs'
import { dirname, resolve } from 'node:path'
import { createSecureContext } from 'node:tls'
import type { Logger } from 'pino'
import { CrdMigratorError, errorMessage } from '../errors.js'
import { FileRefused, MAX_CREDENTIAL_FILE_BYTES, readRegularFile } from '../regular-file.js'

export const MIN_TLS_VERSION = 'TLSv1.2' as const

/**
 * TLS 1.2: ECDHE + AEAD only, ECDSA first (the chart's key), Mozilla "intermediate" without
 * DHE. Node's default ends in `HIGH`, letting in CBC/SHA-1 and RSA key exchange; Go offers all of these.
 */
export const TLS12_CIPHERS = [
  'ECDHE-ECDSA-AES128-GCM-SHA256',
  'ECDHE-RSA-AES128-GCM-SHA256',
  'ECDHE-ECDSA-AES256-GCM-SHA384',
  'ECDHE-RSA-AES256-GCM-SHA384',
  'ECDHE-ECDSA-CHACHA20-POLY1305',
  'ECDHE-RSA-CHACHA20-POLY1305',
] as const

/**
 * TLS 1.3: OpenSSL's suites in Go's order, AES-128-GCM first (OpenSSL's AES-256 first cost
 * each review's decryption ~40% more). Named because `ciphers` without TLS_* turns TLS 1.3 off.
 */
export const TLS13_CIPHERSUITES = ['TLS_AES_128_GCM_SHA256', 'TLS_CHACHA20_POLY1305_SHA256', 'TLS_AES_256_GCM_SHA384'] as const

/** Options of every secure context we serve with: at start-up and on each reload. */
export const TLS_CONTEXT_OPTIONS = Object.freeze({
  minVersion: MIN_TLS_VERSION,
  ciphers: [...TLS13_CIPHERSUITES, ...TLS12_CIPHERS].join(':'),
  // Our order, not the client's: a client preferring a weaker suite of the list gets ours.
  honorCipherOrder: true,
})

export type CertificatePair = ReturnType<typeof validateCertificatePair>

/** Why a pair was refused; the `reason` label of crd_migrator_webhook_certificate_reload_rejected_total. */
export const CERTIFICATE_REJECTIONS = ['unreadable', 'invalid', 'key-mismatch', 'expired', 'not-yet-valid'] as const
export type CertificateRejection = (typeof CERTIFICATE_REJECTIONS)[number]

export class CertificateError extends CrdMigratorError {
  override readonly name = 'CertificateError'
  constructor(
    message: string,
    readonly reason: CertificateRejection = 'invalid',
    /** For not-yet-valid: when it becomes valid. */
    readonly validFrom?: Date,
  ) {
    super('CRDM_CERTIFICATE', message)
  }
}

/** PEM, a matching pair, a usable TLS context, valid at `now`. */
export function validateCertificatePair(cert: string, key: string, now: Date = new Date()) {
  const x509 = orRefuse(() => new X509Certificate(cert), 'certificate is not a PEM X.509 certificate')
  const privateKey = orRefuse(() => createPrivateKey(key), 'key is not a PEM private key')
  if (!x509.checkPrivateKey(privateKey)) {
    throw new CertificateError(
      `the private key does not match the certificate (serial ${x509.serialNumber}); ` + 'probably a rotation caught half-way',
      'key-mismatch',
    )
  }
  orRefuse(() => createSecureContext({ cert, key, ...TLS_CONTEXT_OPTIONS }), 'certificate and key are not usable for TLS')
  const { validFromDate: notBefore, validToDate: notAfter } = x509
  if (now.getTime() > notAfter.getTime()) {
    throw new CertificateError(
      `the certificate expired at ${notAfter.toISOString()} (serial ${x509.serialNumber}); not serving it`,
      'expired',
    )
  }
  if (now.getTime() < notBefore.getTime()) {
    throw new CertificateError(
      `the certificate is not valid before ${notBefore.toISOString()} (serial ${x509.serialNumber}); not serving it yet`,
      'not-yet-valid',
      notBefore,
    )
  }
  const { serialNumber, fingerprint256, subject, subjectAltName } = x509
  return { cert, key, info: { serialNumber, notBefore, notAfter, fingerprint256, subject, subjectAltName } }
}

function orRefuse<T>(make: () => T, what: string): T {
  try {
    return make()
  } catch (err) {
    throw new CertificateError(`${what}: ${errorMessage(err)}`)
  }
}

export async function loadCertificatePair(certFile: string, keyFile: string): Promise<CertificatePair> {
  const [cert, key] = await readPair(certFile, keyFile)
  return validateCertificatePair(cert, key)
}

async function readPair(certFile: string, keyFile: string): Promise<[string, string]> {
  // One after the other, so with both missing the error names the same file (warn once).
  const cert = await readPem(certFile)
  return [cert, await readPem(keyFile)]
}

/** Through regular-file.ts: a FIFO or device is refused at once, not waited on in the thread pool. */
async function readPem(file: string): Promise<string> {
  try {
    const pem = await readRegularFile(file, {
      what: `certificate/key ${file}`,
      code: 'CRDM_CERTIFICATE',
      maxBytes: MAX_CREDENTIAL_FILE_BYTES,
      hint: 'name the PEM files themselves (a FIFO or a device is refused, never waited on or read)',
    })
    return pem.toString('utf8')
  } catch (err) {
    if (err instanceof FileRefused) throw new CertificateError(err.message, 'unreadable')
    const code = (err as NodeJS.ErrnoException).code
    throw new CertificateError(`cannot read certificate/key ${file}: ${code ?? errorMessage(err)}`, 'unreadable')
  }
}

export type WatcherLogger = Pick<Logger, 'info' | 'warn' | 'debug'>

export interface CertificateWatcherOptions {
  certFile: string
  keyFile: string
  /** Called with each new consistent pair; throwing keeps the previous pair as current. */
  onChange: (pair: CertificatePair) => void
  /** Called once per refused pair (or read error), when it is first seen. */
  onReject?: (reason: CertificateRejection, error: CertificateError) => void
  logger?: WatcherLogger
  /** Quiet time after the last directory event before reloading. Default 200 ms. */
  debounceMs?: number
  /** Fallback re-read interval; 0 disables polling. Default 30 s. */
  pollIntervalMs?: number
  /** A pair already loaded at startup, so the first poll does not report it as a change. */
  initial?: CertificatePair
}

export type ReloadResult = 'changed' | 'unchanged' | 'invalid'

export class CertificateWatcher {
  readonly #options: Required<Omit<CertificateWatcherOptions, 'initial' | 'logger' | 'onReject'>> &
    Pick<CertificateWatcherOptions, 'logger' | 'onReject'>
  #current: CertificatePair | undefined
  #watchers = new Map<string, FSWatcher>()
  #poll: NodeJS.Timeout | undefined
  /** Re-reads due: after a directory event's debounce, and when a pair not valid yet becomes valid. */
  #timers = new Map<'debounce' | 'validFrom', NodeJS.Timeout>()
  /** Reads so far, so the first failure can say "at startup". */
  #reads = 0
  #inFlight: Promise<ReloadResult> | undefined
  #again = false
  /** The last rejected pair (or read error), so a bad pair is warned about once, not every poll. */
  #lastRejected: string | undefined
  #stopped = false

  constructor(options: CertificateWatcherOptions) {
    this.#options = {
      ...options,
      debounceMs: options.debounceMs ?? 200,
      pollIntervalMs: options.pollIntervalMs ?? 30_000,
    }
    this.#current = options.initial
  }

  get current(): CertificatePair | undefined {
    return this.#current
  }

  get loaded(): boolean {
    return this.#current !== undefined
  }

  start(): void {
    this.#stopped = false
    this.#ensureWatchers()
    if (this.#options.pollIntervalMs > 0 && !this.#poll) {
      this.#poll = setInterval(() => {
        this.#ensureWatchers()
        void this.reload()
      }, this.#options.pollIntervalMs)
      this.#poll.unref()
    }
  }

  stop(): void {
    this.#stopped = true
    for (const watcher of this.#watchers.values()) watcher.close()
    this.#watchers.clear()
    for (const timer of this.#timers.values()) clearTimeout(timer)
    this.#timers.clear()
    clearInterval(this.#poll)
    this.#poll = undefined
  }

  /** Re-read both files now. Concurrent calls coalesce into one more read after the running one. */
  reload(): Promise<ReloadResult> {
    if (this.#inFlight) {
      this.#again = true
      return this.#inFlight
    }
    const run = async (): Promise<ReloadResult> => {
      let result: ReloadResult
      let changed = false
      do {
        this.#again = false
        result = await this.#reloadOnce()
        changed ||= result === 'changed'
      } while (this.#again && !this.#stopped)
      // Callers that joined a running reload learn whether the pair changed at all.
      return changed ? 'changed' : result
    }
    this.#inFlight = run().finally(() => {
      this.#inFlight = undefined
    })
    return this.#inFlight
  }

  async #reloadOnce(): Promise<ReloadResult> {
    const { certFile, keyFile, logger } = this.#options
    const first = this.#reads++ === 0
    let pair: CertificatePair
    let content = ''
    try {
      const [cert, key] = await readPair(certFile, keyFile)
      content = cert + key
      if (this.#current && cert === this.#current.cert && key === this.#current.key) return 'unchanged'
      pair = validateCertificatePair(cert, key)
    } catch (err) {
      const error = err instanceof CertificateError ? err : new CertificateError(errorMessage(err))
      // Unreadable files have no content to remember; the error text stands in for it.
      const rejected = content || error.message
      const fresh = rejected !== this.#lastRejected
      this.#lastRejected = rejected
      const log = { certFile, keyFile, reason: error.reason, err: error }
      const msg = this.#current
        ? 'ignoring unusable certificate/key; still serving the previous certificate'
        : first
          ? 'no usable serving certificate at startup; waiting for one (not ready)'
          : 'no usable certificate/key yet; not ready'
      logger?.[fresh ? 'warn' : 'debug'](log, msg)
      if (fresh) this.#options.onReject?.(error.reason, error)
      if (error.validFrom) {
        // Polling may be off or slow: a pair that becomes valid is taken when it does (not past
        // setTimeout's 24.8-day maximum; polling covers anything later).
        this.#reloadIn('validFrom', Math.min(Math.max(error.validFrom.getTime() - Date.now(), 0) + 100, 2 ** 31 - 1))
      }
      return 'invalid'
    }
    try {
      this.#options.onChange(pair)
    } catch (err) {
      logger?.warn({ certFile, keyFile, err }, 'failed to apply new certificate; keeping the previous one')
      return 'invalid'
    }
    const previous = this.#current?.info.serialNumber
    this.#current = pair
    this.#lastRejected = undefined
    logger?.info(
      { certFile, serial: pair.info.serialNumber, previousSerial: previous, notAfter: pair.info.notAfter.toISOString() },
      previous ? 'serving certificate reloaded' : 'serving certificate loaded',
    )
    return 'changed'
  }

  /** Re-read `ms` from now, in place of the re-read due for the same `timer`. */
  #reloadIn(timer: 'debounce' | 'validFrom', ms: number): void {
    if (this.#stopped) return
    clearTimeout(this.#timers.get(timer))
    const due = setTimeout(() => {
      this.#timers.delete(timer)
      void this.reload()
    }, ms)
    this.#timers.set(timer, due.unref())
  }

  #ensureWatchers(): void {
    if (this.#stopped) return
    const dirs = new Set([dirname(resolve(this.#options.certFile)), dirname(resolve(this.#options.keyFile))])
    for (const dir of dirs) {
      if (this.#watchers.has(dir)) continue
      try {
        const watcher = watch(dir, { persistent: false }, () => this.#reloadIn('debounce', this.#options.debounceMs))
        watcher.on('error', (err) => {
          this.#options.logger?.warn({ dir, err }, 'certificate directory watch failed; relying on polling')
          watcher.close()
          this.#watchers.delete(dir)
        })
        this.#watchers.set(dir, watcher)
      } catch (err) {
        this.#options.logger?.debug({ dir, err }, 'cannot watch certificate directory yet')
      }
    }
  }
}
