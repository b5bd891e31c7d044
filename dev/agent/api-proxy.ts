/**
 * How a pod reaches the API server: what kube-proxy does for the `default/kubernetes`
 * Service, small. The agent listens on the node's address (the pods' gateway) port 443
 * and relays each TCP connection, TLS untouched, to the API server it talks to itself.
 *
 * A pod's client verifies the API server's serving certificate, whose names the local
 * control plane chooses (dev/controlplane/pki.ts: 127.0.0.1, the servers' own addresses,
 * and `kubernetes.default.svc`): not the gateway's address. So KUBERNETES_SERVICE_HOST is
 * a DNS name of the certificate (`kubernetes.default.svc` when it has it), which the pod's
 * /etc/hosts maps to the gateway; client-go and the project's client (src/kube/client.ts)
 * both accept a name there. An API server whose certificate names the gateway's IP (e.g.
 * started with `--tls-sni-cert-key` for it) gets that IP instead, as in a real cluster.
 */
import { createServer, connect as tcpConnect, type Server, type Socket } from 'node:net'
import { connect as tlsConnect } from 'node:tls'

export interface ApiServerForPods {
  /** KUBERNETES_SERVICE_HOST: a name or IP of the API server's certificate. */
  host: string
  /** KUBERNETES_SERVICE_PORT */
  port: number
  /** The address `host` resolves to in the pod (its /etc/hosts), when it is a name. */
  hostsEntry?: { name: string; ip: string }
}

/** The names (DNS and IP) of the serving certificate of `server` (https://host:port). */
export function servingCertificateNames(server: URL, timeoutMs = 10_000): Promise<{ dns: string[]; ips: string[] }> {
  return new Promise((resolve, reject) => {
    const socket = tlsConnect({
      host: server.hostname.replace(/^\[|\]$/g, ''),
      port: Number(server.port || 443),
      rejectUnauthorized: false,
      servername: /^[\d.]+$|:/.test(server.hostname) ? undefined : server.hostname,
    })
    const timer = setTimeout(() => socket.destroy(new Error(`TLS handshake with ${server.href} timed out`)), timeoutMs)
    socket.once('secureConnect', () => {
      clearTimeout(timer)
      const alt = socket.getPeerCertificate().subjectaltname ?? ''
      socket.end()
      const names = alt.split(/,\s*/)
      resolve({
        dns: names.filter((n) => n.startsWith('DNS:')).map((n) => n.slice(4)),
        ips: names.filter((n) => n.startsWith('IP Address:')).map((n) => n.slice(11)),
      })
    })
    socket.once('error', (err) => {
      clearTimeout(timer)
      reject(err)
    })
  })
}

export class ApiServerForwarder {
  private server: Server | undefined
  private readonly sockets = new Set<Socket>()

  constructor(
    private readonly target: URL,
    private readonly listenHost: string,
    private readonly listenPort = 443,
  ) {}

  /** Listen, and say what pods are told (see the file comment). */
  async start(): Promise<ApiServerForPods> {
    const names = await servingCertificateNames(this.target)
    const targetHost = this.target.hostname.replace(/^\[|\]$/g, '')
    const targetPort = Number(this.target.port || 443)
    this.server = createServer((client) => {
      const upstream = tcpConnect({ host: targetHost, port: targetPort })
      for (const s of [client, upstream]) {
        this.sockets.add(s)
        s.on('close', () => this.sockets.delete(s))
        s.on('error', () => {
          client.destroy()
          upstream.destroy()
        })
      }
      client.pipe(upstream).pipe(client)
    })
    await new Promise<void>((resolve, reject) => {
      this.server!.once('error', reject)
      this.server!.listen(this.listenPort, this.listenHost, () => resolve())
    })
    if (names.ips.includes(this.listenHost)) return { host: this.listenHost, port: this.listenPort }
    const name = names.dns.includes('kubernetes.default.svc') ? 'kubernetes.default.svc' : names.dns.find((n) => !n.includes('*'))
    if (!name) {
      await this.stop()
      throw new Error(
        `the API server's certificate names no DNS name and not ${this.listenHost}: pods could not verify it ` +
          `(start kube-apiserver with --tls-sni-cert-key=<cert naming ${this.listenHost}>,<key>)`,
      )
    }
    return { host: name, port: this.listenPort, hostsEntry: { name, ip: this.listenHost } }
  }

  async stop(): Promise<void> {
    for (const s of this.sockets) s.destroy()
    const server = this.server
    this.server = undefined
    if (server) await new Promise<void>((resolve) => server.close(() => resolve()))
  }
}
