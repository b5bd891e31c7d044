/**
 * A kubeconfig user's headers and client certificate, kept current: token and certificate
 * files (kubelet rotation) re-read every `refreshMs`, exec plugins re-run at expiry, all at
 * once on a 401. The certificate is a new object only when its bytes change, so KubeHttp
 * builds new pools exactly then.
 */
import { createSecureContext } from 'node:tls'
import { CrdMigratorError, errorMessage } from '../errors.js'
import { FileRefused, MAX_CREDENTIAL_FILE_BYTES, readRegularFile, readRegularFileSync, type RegularFileOptions } from '../regular-file.js'
import { runExecPlugin, type ExecCredentialResult, type ExecTerminal } from './exec-credential.js'
import { kubeconfigError, type KubeContext } from './kubeconfig.js'

export interface ClientCertificate {
  cert: string | Buffer
  key: string | Buffer
}

/** Header name to value; a list is sent as one header line per value (Impersonate-Group). */
export type AuthHeaders = Readonly<Record<string, string | readonly string[]>>

export interface CredentialSnapshot {
  headers: AuthHeaders
  clientCertificate: ClientCertificate | undefined
  /** Increases with every load; {@link Credentials.refused} names the one the API server refused. */
  generation: number
}

export interface CredentialsOptions {
  /** How often token and certificate files are read again. */
  refreshMs: number
  /** The terminal an exec plugin may use (default this process's stdin and stderr). */
  terminal?: ExecTerminal
}

/** After a failed reload that kept the previous credentials: wait this long, at most, before trying again. */
const RETRY_FAILED_RELOAD_MS = 5_000

export class Credentials {
  /** True when loading again can give other credentials (files, exec): a 401 is then worth one more try. */
  readonly renewable: boolean
  private snapshot: CredentialSnapshot | undefined
  private loading: Promise<CredentialSnapshot> | undefined
  private loadedAt = 0
  private holdUntil = 0
  private refusedGeneration: number | undefined
  private exec: ExecCredentialResult | undefined
  private generation = 0

  constructor(
    private readonly context: KubeContext,
    private readonly options: CredentialsOptions,
  ) {
    const u = context.user
    this.renewable = Boolean(u.tokenFile || u.clientCertificate || u.clientKey || (u.exec && !u.token && !u.tokenFile))
  }

  /** The credentials, when they need no reload now (most requests): no promise to wait on. */
  fresh(): CredentialSnapshot | undefined {
    return this.snapshot && !this.due() ? this.snapshot : undefined
  }

  /** The credentials to send now; loads them when due (cheap otherwise: a few comparisons). */
  async current(): Promise<CredentialSnapshot> {
    const fresh = this.fresh()
    if (fresh) return fresh
    this.loading ??= this.reload().finally(() => {
      this.loading = undefined
    })
    return this.loading
  }

  /** The API server answered 401 to these credentials: load them again before the next request. */
  refused(generation: number): void {
    if (this.snapshot?.generation === generation) this.refusedGeneration = generation
  }

  private due(): boolean {
    const now = Date.now()
    if (this.refusedGeneration !== undefined) return true
    if (now < this.holdUntil) return false
    if (this.exec?.expiresAt !== undefined && now >= this.exec.expiresAt) return true
    const u = this.context.user
    return Boolean(u.tokenFile || u.clientCertificate || u.clientKey) && now - this.loadedAt >= this.options.refreshMs
  }

  private async reload(): Promise<CredentialSnapshot> {
    const refused = this.refusedGeneration !== undefined
    try {
      this.snapshot = await this.load(refused)
      this.refusedGeneration = undefined
      this.holdUntil = 0
      return this.snapshot
    } catch (err) {
      // A file caught mid-rotation (the key written, the certificate not yet), say: keep
      // what works until the next try, unless the API server has refused it already.
      if (this.snapshot && !refused) {
        this.holdUntil = Date.now() + Math.min(this.options.refreshMs, RETRY_FAILED_RELOAD_MS)
        return this.snapshot
      }
      throw err
    } finally {
      this.loadedAt = Date.now()
    }
  }

  private async load(refused: boolean): Promise<CredentialSnapshot> {
    const { user, cluster } = this.context
    const headers: Record<string, string | string[]> = { ...impersonationHeaders(this.context) }
    if (user.username !== undefined || user.password !== undefined) {
      headers['Authorization'] = `Basic ${Buffer.from(`${user.username ?? ''}:${user.password ?? ''}`).toString('base64')}`
    }
    // As client-go: a token file wins over a token, and either over an exec plugin.
    let token = user.tokenFile ? await readToken(user.tokenFile, user.name) : (user.token ?? user.oidcIdToken)
    let fromPlugin: ClientCertificate | undefined
    if (user.exec && token === undefined) {
      const expired = this.exec?.expiresAt !== undefined && Date.now() >= this.exec.expiresAt
      if (!this.exec || expired || refused) this.exec = await runExecPlugin(user.exec, cluster, user.name, this.options.terminal)
      token = this.exec.token
      fromPlugin = this.exec.clientCertificate
    }
    if (token !== undefined) headers['Authorization'] = `Bearer ${token}`
    const clientCertificate = this.sameAsBefore(await this.readClientCertificate()) ?? this.sameAsBefore(fromPlugin)
    return { headers, clientCertificate, generation: ++this.generation }
  }

  /** The kubeconfig's client certificate: its data, or its files as they are now. */
  private async readClientCertificate(): Promise<ClientCertificate | undefined> {
    const u = this.context.user
    const cert =
      u.clientCertificateData ??
      (u.clientCertificate ? await readCredentialFile(u.clientCertificate, u.name, 'client certificate') : undefined)
    const key = u.clientKeyData ?? (u.clientKey ? await readCredentialFile(u.clientKey, u.name, 'client key') : undefined)
    return cert !== undefined && key !== undefined ? { cert, key } : undefined
  }

  /** The previous certificate object when the bytes are the same, else the new one once it proves a usable pair. */
  private sameAsBefore(next: ClientCertificate | undefined): ClientCertificate | undefined {
    if (next === undefined) return undefined
    const previous = this.snapshot?.clientCertificate
    if (previous && equalBytes(previous.cert, next.cert) && equalBytes(previous.key, next.key)) return previous
    try {
      createSecureContext({ cert: next.cert, key: next.key })
    } catch (err) {
      throw kubeconfigError(
        `the client certificate and key of user ${JSON.stringify(this.context.user.name)} in the ${this.context.origin} are not a usable pair: ${errorMessage(err)}`,
        err,
      )
    }
    return next
  }
}

function impersonationHeaders(context: KubeContext): Record<string, string | string[]> {
  const imp = context.user.impersonate
  if (!imp) return {}
  const headers: Record<string, string | string[]> = {}
  if (imp.user) headers['Impersonate-User'] = imp.user
  if (imp.uid) headers['Impersonate-Uid'] = imp.uid
  // One header line per group and per extra value: the API server does not split values on commas.
  if (imp.groups.length > 0) headers['Impersonate-Group'] = [...imp.groups]
  for (const [key, values] of Object.entries(imp.extra)) headers[`Impersonate-Extra-${encodeURIComponent(key)}`] = [...values]
  return headers
}

/** Through regular-file.ts: a FIFO or device is refused at once, never waited on in the thread pool, where no deadline reaches. */
async function readCredentialFile(path: string, user: string, what: string): Promise<Buffer> {
  const file = `${path} (user ${JSON.stringify(user)})`
  return readRegularFile(path, credentialFileOptions(`${what} ${file}`)).catch((err: unknown) => {
    throw cannotRead(file, err)
  })
}

/** A file the kubeconfig names (with `options`: the kubeconfig itself) read at once; a failure as cannotRead says it. */
export function readKubeconfigFileSync(path: string, what: string, options: Partial<RegularFileOptions> = {}): Buffer {
  try {
    return readRegularFileSync(path, { ...credentialFileOptions(what), ...options })
  } catch (err) {
    throw cannotRead(what, err)
  }
}

/** How a credential file of the kubeconfig is read (regular-file.ts), `what` naming it in messages. */
function credentialFileOptions(what: string): RegularFileOptions {
  return {
    what,
    code: 'CRDM_KUBECONFIG',
    maxBytes: MAX_CREDENTIAL_FILE_BYTES,
    hint: 'credentials are read from regular files only (a FIFO or a device is refused, never waited on or read)',
  }
}

/** A refused file as regular-file.ts refused it; any other failure to read `what` as a kubeconfig error. */
function cannotRead(what: string, err: unknown): CrdMigratorError {
  if (err instanceof FileRefused) return err
  return kubeconfigError(`cannot read ${what}: ${errorMessage(err)}`, err)
}

async function readToken(path: string, user: string): Promise<string> {
  const token = (await readCredentialFile(path, user, 'token file')).toString('utf8').trim()
  if (token === '') throw kubeconfigError(`token file ${path} (user ${JSON.stringify(user)}) is empty`)
  return token
}

function equalBytes(a: string | Buffer, b: string | Buffer): boolean {
  return Buffer.from(a).equals(Buffer.from(b))
}
