/**
 * Connection pools to one API server as a kubeconfig cluster says (CA, tls-server-name, proxy,
 * client certificate); the one place sending requests: KubeHttp and the conversion webhook's POST (conversion-review.ts) use {@link roundTrip}.
 */
import type { Agent, AgentOptions as HttpAgentOptions, ClientRequest, IncomingHttpHeaders } from 'node:http'
import type { Socket } from 'node:net'
import https from 'node:https'
import { checkServerIdentity, TLSSocket, type PeerCertificate } from 'node:tls'
import { readKubeconfigFileSync, type ClientCertificate } from './credentials.js'
import { http } from './node-http.js'
import { isServerName, type KubeCluster } from './kubeconfig.js'

export interface AgentOptions {
  /** Pooled sockets at most (Infinity: one per stream, for watches). */
  maxSockets: number
  /** With KubeHttp.forEndpoint: the name the certificate is checked for (the kubeconfig's server host). */
  identityHost?: string | undefined
  /** The proxy to tunnel through: the kubeconfig's proxy-url, else the environment's (proxy-env.ts). */
  proxy?: URL | undefined
}

export interface KubeTlsOptions {
  ca?: string | Buffer
  cert?: string | Buffer
  key?: string | Buffer
  rejectUnauthorized?: boolean
  servername?: string
}

/** The cluster's TLS settings with the user's certificate; reads the CA file (so call it when building a pool). */
export function tlsOptions(cluster: KubeCluster, clientCertificate: ClientCertificate | undefined): KubeTlsOptions {
  const tls: KubeTlsOptions = {}
  const ca = cluster.certificateAuthorityData ?? (cluster.certificateAuthority ? readCa(cluster) : undefined)
  if (ca !== undefined) tls.ca = ca
  if (clientCertificate) {
    tls.cert = clientCertificate.cert
    tls.key = clientCertificate.key
  }
  if (cluster.insecureSkipTlsVerify) tls.rejectUnauthorized = false
  if (cluster.tlsServerName && isServerName(cluster.tlsServerName)) tls.servername = cluster.tlsServerName
  return tls
}

/** A keep-alive pool for `server` (the cluster's, or one API server's address). */
export function createAgent(
  server: URL,
  cluster: KubeCluster,
  clientCertificate: ClientCertificate | undefined,
  options: AgentOptions,
): Agent {
  const common: HttpAgentOptions = {
    keepAlive: true,
    maxSockets: options.maxSockets,
    maxFreeSockets: Number.isFinite(options.maxSockets) ? options.maxSockets : 256,
    // Node's own proxy support (CONNECT tunnels for https), given the one proxy already
    // chosen for this server: NO_PROXY was applied then (proxy-env.ts), proxy-url ignores it.
    ...(options.proxy ? { proxyEnv: { HTTPS_PROXY: options.proxy.href, HTTP_PROXY: options.proxy.href } } : {}),
  }
  if (server.protocol === 'http:') return new http.Agent(common)
  const tls = tlsOptions(cluster, clientCertificate)
  // The name the certificate must cover: tls-server-name, else the kubeconfig's server host
  // (also when talking to one API server by address).
  const expected = cluster.tlsServerName ?? options.identityHost
  return new https.Agent({
    ...common,
    ...tls,
    ...(expected !== undefined
      ? {
          ...(tls.servername === undefined && isServerName(expected) ? { servername: expected } : {}),
          checkServerIdentity: (_host: string, cert: PeerCertificate) => checkServerIdentity(expected, cert),
        }
      : {}),
  })
}

export interface RoundTripAnswer {
  status: number
  headers: IncomingHttpHeaders
  text: string
}

export interface RoundTripErrors {
  /** The error a request fails with when its socket idles past `timeout`. */
  timedOut: () => Error
  /** Deadline to connect (TCP, then TLS): an address that drops packets fails in seconds, not after the request's whole timeout. */
  connectTimeoutMs?: number
  /** What a request error is turned into (e.g. connection-errors.ts explainConnectionError); the timedOut error too. */
  explain?: (err: Error) => unknown
}

/** One request and its whole answer, whatever the status; body and headers in one write (one TLS record). */
export function roundTrip(
  options: https.RequestOptions,
  payload: string | Buffer | undefined,
  errors: RoundTripErrors,
): Promise<RoundTripAnswer> {
  const lib = options.protocol === 'http:' ? http : https
  return new Promise((resolve, reject) => {
    const r = lib.request(options, (res) => {
      const chunks: Buffer[] = []
      res.on('data', (c: Buffer) => chunks.push(c))
      res.on('error', reject)
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, text: Buffer.concat(chunks).toString('utf8') }))
    })
    r.on('timeout', () => r.destroy(errors.timedOut()))
    r.on('error', (err) => reject(errors.explain ? errors.explain(err) : err))
    if (errors.connectTimeoutMs !== undefined) limitConnect(r, errors.connectTimeoutMs)
    r.end(payload)
  })
}

/** Closes idle sockets, and each busy one when its request ends: in-flight requests and watches finish on the old credentials. */
export function retireAgent(agent: Agent): void {
  agent.keepSocketAlive = () => false
  for (const sockets of Object.values(agent.freeSockets)) for (const socket of sockets ?? []) socket.destroy()
}

/** The cluster's certificate-authority file, through regular-file.ts (a FIFO or a device refused at once, at most MAX_CREDENTIAL_FILE_BYTES). */
function readCa(cluster: KubeCluster): Buffer {
  const file = cluster.certificateAuthority!
  return readKubeconfigFileSync(file, `certificate-authority ${file} of cluster ${JSON.stringify(cluster.name)}`)
}

/** ETIMEDOUT when a new socket is not connected (TLS: handshake done) within `ms`, so a silent server is caught too. */
export function limitConnect(r: ClientRequest, ms: number): void {
  r.once('socket', (socket: Socket) => {
    if (!socket.connecting) return
    const timer = setTimeout(() => {
      r.destroy(Object.assign(new Error(`connecting timed out after ${ms} ms`), { code: 'ETIMEDOUT' }))
    }, ms)
    const done = () => clearTimeout(timer)
    socket.once(socket instanceof TLSSocket ? 'secureConnect' : 'connect', done)
    socket.once('close', done)
  })
}
