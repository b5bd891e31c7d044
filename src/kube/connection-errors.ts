/** Why a connection failed (CRDM_UNREACHABLE, CRDM_TLS) naming the server and what to fix; decided on the error's code, never its message. */
import { CrdMigratorError, errorMessage } from '../errors.js'
import { urlHost, type KubeCluster } from './kubeconfig.js'

/** Errno codes meaning "nothing answered at this address", with what each says to a person. */
const UNREACHABLE: Readonly<Record<string, string>> = {
  ECONNREFUSED: 'connection refused: nothing listens there',
  ENOTFOUND: 'the name does not resolve',
  EAI_AGAIN: 'the name could not be resolved now (DNS)',
  EHOSTUNREACH: 'no route to the host',
  ENETUNREACH: 'the network is unreachable',
  ETIMEDOUT: 'the connection timed out',
  ECONNRESET: 'the connection was reset',
  EPIPE: 'the connection was closed',
}

const UNTRUSTED: ReadonlySet<string> = new Set([
  'UNABLE_TO_VERIFY_LEAF_SIGNATURE',
  'UNABLE_TO_GET_ISSUER_CERT',
  'UNABLE_TO_GET_ISSUER_CERT_LOCALLY',
  'SELF_SIGNED_CERT_IN_CHAIN',
  'DEPTH_ZERO_SELF_SIGNED_CERT',
  'CERT_SIGNATURE_FAILURE',
  'CERT_UNTRUSTED',
  'CERT_REJECTED',
])
const EXPIRED: ReadonlySet<string> = new Set(['CERT_HAS_EXPIRED', 'CERT_NOT_YET_VALID'])
const ALTNAME = 'ERR_TLS_CERT_ALTNAME_INVALID'

/** The API server could not be reached. `retryable`: it answered before (a restart, say), so asking again may help. */
export class KubeUnreachableError extends CrdMigratorError {
  override readonly name = 'KubeUnreachableError'

  constructor(
    readonly server: string,
    /** The errno: ECONNREFUSED, ENOTFOUND, ETIMEDOUT, ... */
    readonly errno: string,
    readonly retryable: boolean,
    attempts: number,
    cause: unknown,
  ) {
    const tries = attempts > 1 ? ` (${attempts} attempts)` : ''
    const what = retryable ? `lost the API server at ${server}` : `cannot reach the API server at ${server}`
    super('CRDM_UNREACHABLE', `${what}: ${errno}, ${UNREACHABLE[errno] ?? errorMessage(cause)}${tries}`, { cause })
  }
}

/** The TLS handshake failed: a setting to fix (or a server certificate to renew), never retried. */
export class KubeTlsError extends CrdMigratorError {
  override readonly name = 'KubeTlsError'

  constructor(
    message: string,
    /** OpenSSL's or Node's code: CERT_HAS_EXPIRED, ERR_TLS_CERT_ALTNAME_INVALID, ... */
    readonly tlsCode: string,
    cause: unknown,
  ) {
    super('CRDM_TLS', message, { cause })
  }
}

/** The error's string `code` (an errno, a TLS or a Node code), if it has one. */
export function codeOf(err: unknown): string | undefined {
  const code = (err as { code?: unknown } | null)?.code
  return typeof code === 'string' ? code : undefined
}

/** The errno of a connection failure, unwrapped or not (ECONNREFUSED, ...); undefined for anything else. */
export function unreachableErrno(err: unknown): string | undefined {
  if (err instanceof KubeUnreachableError) return err.errno
  const code = codeOf(err)
  if (code !== undefined && code in UNREACHABLE) return code
  return err instanceof Error && err.name === 'TimeoutError' ? 'ETIMEDOUT' : undefined
}

/** The code of any connection failure, wrapped here or not: an errno or a TLS code. */
export function connectionErrorCode(err: unknown): string | undefined {
  if (err instanceof KubeTlsError) return err.tlsCode
  return unreachableErrno(err) ?? codeOf(err)
}

/** undefined when `err` is not a TLS failure. */
export function tlsError(err: unknown, server: URL, cluster: KubeCluster): KubeTlsError | undefined {
  const code = codeOf(err)
  if (code === undefined) return undefined
  const where = `cluster ${JSON.stringify(cluster.name)} in the kubeconfig`
  const certificate = `TLS: the certificate of the API server at ${server.host}`
  let message: string
  if (code === ALTNAME) {
    const altNames = (err as { cert?: { subjectaltname?: unknown } }).cert?.subjectaltname
    const names = typeof altNames === 'string' ? ` (it covers ${altNames})` : ''
    const checked = cluster.tlsServerName ?? urlHost(server)
    message =
      `${certificate} does not cover ${JSON.stringify(checked)}${names} (hostname mismatch); ` +
      (cluster.tlsServerName ? `fix tls-server-name of ${where}` : `set tls-server-name of ${where} to a name it covers`)
  } else if (UNTRUSTED.has(code)) {
    message = `${certificate} is not trusted: ${code}, signed by an authority not in the CA bundle; check certificate-authority(-data) of ${where}`
  } else if (EXPIRED.has(code)) {
    message = `${certificate} is not valid now: ${code}; renew the server's certificate, or check this machine's clock`
  } else if (code.startsWith('ERR_SSL_') || code.startsWith('ERR_TLS_')) {
    message = `TLS: the handshake with the API server at ${server.host} failed: ${code} (${errorMessage(err)})`
  } else return undefined
  return new KubeTlsError(message, code, err)
}

/** A TLS error, an unreachable server (`reached`: it answered this client before, so the failure may pass), or `err` as it is. */
export function explainConnectionError(err: unknown, server: URL, cluster: KubeCluster, reached: boolean, attempts = 1): unknown {
  const tls = tlsError(err, server, cluster)
  if (tls) return tls
  const errno = unreachableErrno(err)
  if (errno !== undefined && !(err instanceof CrdMigratorError)) {
    return new KubeUnreachableError(server.href.replace(/\/$/, ''), errno, reached, attempts, err)
  }
  return err
}
