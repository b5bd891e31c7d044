import { createServer, type Server } from 'node:net'

function listen(host: string): Promise<Server> {
  return new Promise((resolve, reject) => {
    const srv = createServer()
    srv.unref()
    srv.once('error', reject)
    srv.listen({ host, port: 0, exclusive: true }, () => resolve(srv))
  })
}

/**
 * `count` distinct free TCP ports on `host`: all are bound at once (port 0) and only then
 * released, so they differ from each other. Like envtest, this is racy against other
 * processes grabbing the port before our child binds it; the window is milliseconds.
 */
export async function freePorts(count: number, host = '127.0.0.1'): Promise<number[]> {
  const servers: Server[] = []
  try {
    for (let i = 0; i < count; i++) servers.push(await listen(host))
    return servers.map((s) => {
      const addr = s.address()
      if (addr === null || typeof addr === 'string') throw new Error('unexpected server address')
      return addr.port
    })
  } finally {
    await Promise.all(servers.map((s) => new Promise<void>((resolve) => s.close(() => resolve()))))
  }
}
