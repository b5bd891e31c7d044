/**
 * A small HTTP CONNECT proxy on loopback for tests of a kubeconfig's proxy-url: it counts
 * the tunnels it opens and the hosts they were for, and can resolve names itself (`hosts`),
 * so a kubeconfig naming a server only the proxy can reach proves the requests went
 * through it. Plain-HTTP requests in absolute form are refused (405): only tunnels.
 */
import http from 'node:http'
import net from 'node:net'
import t from 'tap'

export interface ConnectProxy {
  /** `http://127.0.0.1:<port>` */
  url: string
  /** `host:port` of every CONNECT, in order. */
  readonly tunnels: readonly string[]
  close(): Promise<void>
}

/** Starts a proxy, closed when the test ends. `hosts` maps a name to the address the proxy connects to instead. */
export async function startConnectProxy(hosts: Record<string, string> = {}): Promise<ConnectProxy> {
  const tunnels: string[] = []
  const sockets = new Set<net.Socket>()
  const server = http.createServer((_req, res) => {
    res.writeHead(405).end('this test proxy only tunnels (CONNECT)')
  })
  server.on('connect', (req: http.IncomingMessage, client: net.Socket, head: Buffer) => {
    const target = req.url ?? ''
    tunnels.push(target)
    const colon = target.lastIndexOf(':')
    const host = target.slice(0, colon).replace(/^\[|\]$/g, '')
    const upstream = net.connect(Number(target.slice(colon + 1)), hosts[host] ?? host)
    sockets.add(client).add(upstream)
    const drop = () => {
      client.destroy()
      upstream.destroy()
    }
    upstream.on('connect', () => {
      client.write('HTTP/1.1 200 Connection Established\r\n\r\n')
      if (head.length > 0) upstream.write(head)
      upstream.pipe(client)
      client.pipe(upstream)
    })
    upstream.on('error', () => {
      if (!client.destroyed) client.end('HTTP/1.1 502 Bad Gateway\r\n\r\n')
      drop()
    })
    client.on('error', drop)
    client.on('close', () => sockets.delete(client))
    upstream.on('close', () => sockets.delete(upstream))
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address() as net.AddressInfo
  const close = async () => {
    for (const s of sockets) s.destroy()
    await new Promise<void>((resolve) => server.close(() => resolve()))
  }
  t.teardown(close)
  return { url: `http://127.0.0.1:${port}`, tunnels, close }
}
