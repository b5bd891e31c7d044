/**
 * A TCP forwarder: listens on one address and pipes every connection to another, so a
 * test can reach the API server at an address its serving certificate does not cover.
 */
import net from 'node:net'
import t from 'tap'

export interface TcpForward {
  host: string
  port: number
  close(): Promise<void>
}

/** Listens on `host` (a free port), forwards to `target` (`host:port`); closed when the test ends. */
export async function startTcpForward(host: string, target: { host: string; port: number }): Promise<TcpForward> {
  const sockets = new Set<net.Socket>()
  const server = net.createServer((client) => {
    const upstream = net.connect(target.port, target.host)
    sockets.add(client).add(upstream)
    client.pipe(upstream).pipe(client)
    const drop = () => {
      client.destroy()
      upstream.destroy()
    }
    client.on('error', drop)
    upstream.on('error', drop)
    client.on('close', () => sockets.delete(client))
    upstream.on('close', () => sockets.delete(upstream))
  })
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject)
    server.listen(0, host, resolve)
  })
  const close = async () => {
    for (const s of sockets) s.destroy()
    await new Promise<void>((resolve) => server.close(() => resolve()))
  }
  t.teardown(close)
  return { host, port: (server.address() as net.AddressInfo).port, close }
}
