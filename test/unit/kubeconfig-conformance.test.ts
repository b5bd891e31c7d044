/**
 * Our kubeconfig reader (src/kube/kubeconfig.ts, client.ts, credentials.ts, transport.ts)
 * against @kubernetes/client-node's KubeConfig, the conformance oracle (a devDependency: the
 * product does not load it). Each shape of kubeconfig is read by both; what a request would
 * carry is compared: the server, the CA, the client certificate and key, the auth headers,
 * insecure-skip-tls-verify, tls-server-name, proxy-url and the namespace. Where we differ on
 * purpose (kubectl's behaviour where client-node has its own, or a field client-node does
 * not read) the test asserts the difference, and docs/configuration.md lists it ("Kubeconfig",
 * differences from client-node). Field-by-field parsing and errors: kubeconfig.test.ts.
 */
import { chmod, mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises'
import os from 'node:os'
import path from 'node:path'
import { PassThrough } from 'node:stream'
import { KubeConfig } from '@kubernetes/client-node'
import { generate } from 'selfsigned'
import t, { type Test } from 'tap'
import { stringify } from 'yaml'
import { loadKubeConfig } from '../../src/kube/client.js'
import { Credentials } from '../../src/kube/credentials.js'
import type { KubeContext } from '../../src/kube/kubeconfig.js'
import { tlsOptions } from '../../src/kube/transport.js'

const b64 = (s: string) => Buffer.from(s).toString('base64')
const text = (v: string | Buffer | undefined | null): string | undefined =>
  v === undefined || v === null ? undefined : Buffer.isBuffer(v) ? v.toString('utf8') : v

/** What a request to the cluster would carry, as both clients see it. */
interface Seen {
  server: string
  ca?: string
  cert?: string
  key?: string
  headers: Record<string, string>
  insecure: boolean
  servername?: string
  proxy?: string
  namespace?: string
}

/** How a shape is read: a file (--kubeconfig), $KUBECONFIG, or in-cluster; and --context. */
interface Source {
  file?: string
  kubeconfigEnv?: string
  inCluster?: { prefix: string; env: Record<string, string> }
  context?: string
}

interface Shape {
  name: string
  setup: (dir: string) => Promise<Source>
  /** An intended difference: asserts it, instead of equality (each is a row of docs/configuration.md's table). */
  differs?: (t: Test, ours: Seen | Error, theirs: Seen | Error, dir: string) => Promise<void> | void
}

const pems = await generate([{ name: 'commonName', value: 'client' }], { keyType: 'ec' })
const CA = pems.cert
const CERT = pems.cert
const KEY = pems.private

async function tempDir(): Promise<string> {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'crd-migrator-conformance-'))
  t.teardown(() => rm(dir, { recursive: true, force: true }))
  return dir
}

async function write(file: string, content: string | object, mode?: number): Promise<string> {
  await mkdir(path.dirname(file), { recursive: true })
  await writeFile(file, typeof content === 'string' ? content : stringify(content))
  if (mode !== undefined) await chmod(file, mode)
  return file
}

/** A kubeconfig of one context (cluster `c`, user `u`), current unless `current` is false. */
function config(
  cluster: Record<string, unknown>,
  user: Record<string, unknown>,
  extra: { namespace?: string; current?: boolean; name?: string } = {},
) {
  const name = extra.name ?? 'ctx'
  return {
    apiVersion: 'v1',
    kind: 'Config',
    clusters: [{ name: `${name}-c`, cluster: { server: 'https://api.example.com:6443', ...cluster } }],
    users: [{ name: `${name}-u`, user }],
    contexts: [{ name, context: { cluster: `${name}-c`, user: `${name}-u`, ...(extra.namespace ? { namespace: extra.namespace } : {}) } }],
    ...(extra.current === false ? {} : { 'current-context': name }),
  }
}

/** An exec plugin printing this ExecCredential status, keeping the KUBERNETES_EXEC_INFO of its run in `info.json`. */
async function plugin(dir: string, name: string, apiVersion: string, status: string): Promise<string> {
  return write(
    path.join(dir, name),
    `#!/bin/sh\nprintf '%s' "$KUBERNETES_EXEC_INFO" > "${dir}/${name}.info.json"\n` +
      `printf '%s' '{"apiVersion":"${apiVersion}","kind":"ExecCredential","status":${status}}'\n`,
    0o755,
  )
}

const V1 = 'client.authentication.k8s.io/v1'
const V1BETA1 = 'client.authentication.k8s.io/v1beta1'

async function ours(source: Source): Promise<Seen> {
  let context: KubeContext
  if (source.inCluster) {
    context = loadKubeConfig(undefined, {
      env: source.inCluster.env,
      homeDir: path.join(source.inCluster.prefix, 'no-home'),
      serviceAccountDir: path.join(source.inCluster.prefix, 'var/run/secrets/kubernetes.io/serviceaccount'),
    })
  } else {
    context = loadKubeConfig(source.file, {
      context: source.context,
      env: source.kubeconfigEnv ? { KUBECONFIG: source.kubeconfigEnv } : {},
      homeDir: '/nonexistent',
      serviceAccountDir: '/nonexistent',
    })
  }
  const credentials = await new Credentials(context, {
    refreshMs: 0,
    terminal: { stdinIsTerminal: false, stderr: new PassThrough() },
  }).current()
  const tls = tlsOptions(context.cluster, credentials.clientCertificate)
  const headers: Record<string, string> = {}
  for (const [k, v] of Object.entries(credentials.headers)) headers[k] = typeof v === 'string' ? v : v.join(', ')
  return clean({
    server: context.cluster.server.href.replace(/\/$/, ''),
    ca: text(tls.ca),
    cert: text(tls.cert),
    key: text(tls.key),
    headers,
    insecure: tls.rejectUnauthorized === false,
    // tls-server-name as configured (we send it as SNI only when it is a name, see docs/configuration.md).
    servername: context.cluster.tlsServerName,
    proxy: context.cluster.proxyUrl?.href.replace(/\/$/, ''),
    namespace: context.namespace,
  })
}

/** client-node's view, process.env set as the shape says while it reads. */
async function theirs(source: Source): Promise<Seen> {
  const saved = { ...process.env }
  try {
    const kc = new KubeConfig()
    if (source.inCluster) {
      Object.assign(process.env, source.inCluster.env)
      kc.loadFromCluster(source.inCluster.prefix)
    } else if (source.kubeconfigEnv) {
      process.env['KUBECONFIG'] = source.kubeconfigEnv
      kc.loadFromDefault()
    } else {
      kc.loadFromFile(source.file!)
    }
    if (source.context) kc.setCurrentContext(source.context)
    const opts: {
      ca?: string | Buffer
      cert?: string | Buffer
      key?: string | Buffer
      headers?: Record<string, string>
      auth?: string
      rejectUnauthorized?: boolean
      servername?: string
    } = {}
    await kc.applyToHTTPSOptions(opts)
    const cluster = kc.getCurrentCluster()!
    const headers = { ...opts.headers }
    if (opts.auth) headers['Authorization'] = `Basic ${b64(opts.auth)}`
    return clean({
      // The same URL as ours once normalised (https://h:443 is https://h).
      server: new URL(cluster.server).href.replace(/\/$/, ''),
      ca: text(opts.ca),
      cert: text(opts.cert),
      key: text(opts.key),
      headers,
      insecure: opts.rejectUnauthorized === false,
      servername: opts.servername,
      proxy: cluster.proxyUrl?.replace(/\/$/, ''),
      namespace: kc.getContextObject(kc.getCurrentContext())?.namespace,
    })
  } finally {
    for (const k of Object.keys(process.env)) if (!(k in saved)) delete process.env[k]
    Object.assign(process.env, saved)
  }
}

function clean(seen: Seen): Seen {
  return Object.fromEntries(Object.entries(seen).filter(([, v]) => v !== undefined)) as unknown as Seen
}

const outcome = async (read: () => Promise<Seen>): Promise<Seen | Error> => read().catch((err: unknown) => err as Error)

const seen = (s: Seen | Error): Seen => {
  if (s instanceof Error) throw s
  return s
}

const SHAPES: Shape[] = [
  {
    name: 'token, CA data',
    setup: async (dir) => ({
      file: await write(path.join(dir, 'config'), config({ 'certificate-authority-data': b64(CA) }, { token: 'tok' })),
    }),
  },
  {
    name: 'CA file, relative to the kubeconfig',
    setup: async (dir) => {
      await write(path.join(dir, 'pki', 'ca.crt'), CA)
      return { file: await write(path.join(dir, 'config'), config({ 'certificate-authority': 'pki/ca.crt' }, { token: 'tok' })) }
    },
  },
  {
    name: 'CA file, absolute',
    setup: async (dir) => ({
      file: await write(
        path.join(dir, 'config'),
        config({ 'certificate-authority': await write(path.join(dir, 'abs-ca.crt'), CA) }, { token: 'tok' }),
      ),
    }),
  },
  {
    name: 'client certificate and key as data',
    setup: async (dir) => ({
      file: await write(
        path.join(dir, 'config'),
        config({ 'certificate-authority-data': b64(CA) }, { 'client-certificate-data': b64(CERT), 'client-key-data': b64(KEY) }),
      ),
    }),
  },
  {
    name: 'client certificate and key as files, relative',
    setup: async (dir) => {
      await write(path.join(dir, 'certs', 'me.crt'), CERT)
      await write(path.join(dir, 'certs', 'me.key'), KEY)
      return {
        file: await write(path.join(dir, 'config'), config({}, { 'client-certificate': 'certs/me.crt', 'client-key': 'certs/me.key' })),
      }
    },
  },
  {
    name: 'username and password (basic auth)',
    setup: async (dir) => ({ file: await write(path.join(dir, 'config'), config({}, { username: 'admin', password: 's3cret' })) }),
  },
  {
    name: 'tls-server-name',
    setup: async (dir) => ({
      file: await write(
        path.join(dir, 'config'),
        config({ server: 'https://10.0.0.1:6443', 'tls-server-name': 'kubernetes.default' }, { token: 't' }),
      ),
    }),
  },
  {
    name: 'insecure-skip-tls-verify',
    setup: async (dir) => ({ file: await write(path.join(dir, 'config'), config({ 'insecure-skip-tls-verify': true }, { token: 't' })) }),
  },
  {
    name: 'proxy-url http',
    setup: async (dir) => ({
      file: await write(path.join(dir, 'config'), config({ 'proxy-url': 'http://proxy.example.com:3128' }, { token: 't' })),
    }),
  },
  {
    name: 'proxy-url https',
    setup: async (dir) => ({
      file: await write(path.join(dir, 'config'), config({ 'proxy-url': 'https://proxy.example.com:3129' }, { token: 't' })),
    }),
  },
  {
    name: 'a server with a path prefix (Rancher-style proxy)',
    setup: async (dir) => ({
      file: await write(path.join(dir, 'config'), config({ server: 'https://rancher.example.com/k8s/clusters/c-1' }, { token: 't' })),
    }),
  },
  {
    name: 'an IPv6 server',
    setup: async (dir) => ({ file: await write(path.join(dir, 'config'), config({ server: 'https://[fd00::1]:6443' }, { token: 't' })) }),
  },
  {
    name: 'namespace of the context',
    setup: async (dir) => ({ file: await write(path.join(dir, 'config'), config({}, { token: 't' }, { namespace: 'team-a' })) }),
  },
  {
    name: '--context instead of current-context',
    setup: async (dir) => {
      const one = config({ server: 'https://one:6443' }, { token: 'one' }, { name: 'one' })
      const two = config({ server: 'https://two:6443' }, { token: 'two' }, { name: 'two', namespace: 'ns2' })
      const both = {
        ...one,
        clusters: [...one.clusters, ...two.clusters],
        users: [...one.users, ...two.users],
        contexts: [...one.contexts, ...two.contexts],
      }
      return { file: await write(path.join(dir, 'config'), both), context: 'two' }
    },
  },
  {
    name: 'impersonation: as',
    setup: async (dir) => ({ file: await write(path.join(dir, 'config'), config({}, { token: 't', as: 'alice' })) }),
  },
  {
    name: 'KUBECONFIG with two files, distinct names, relative paths against each file',
    setup: async (dir) => {
      await write(path.join(dir, 'a', 'ca.crt'), CA)
      await write(path.join(dir, 'b', 'client.crt'), CERT)
      await write(path.join(dir, 'b', 'client.key'), KEY)
      const a = await write(path.join(dir, 'a', 'config'), config({ 'certificate-authority': 'ca.crt' }, { token: 'a' }, { name: 'a' }))
      const b = await write(
        path.join(dir, 'b', 'config'),
        config(
          { server: 'https://b:6443' },
          { 'client-certificate': 'client.crt', 'client-key': 'client.key' },
          { name: 'b', current: false },
        ),
      )
      return { kubeconfigEnv: [a, b].join(path.delimiter), context: 'b' }
    },
  },
  {
    name: 'KUBECONFIG with two files, current-context in the first only',
    setup: async (dir) => {
      const a = await write(path.join(dir, 'a'), config({ server: 'https://a:6443' }, { token: 'a' }, { name: 'a' }))
      const b = await write(path.join(dir, 'b'), config({ server: 'https://b:6443' }, { token: 'b' }, { name: 'b', current: false }))
      return { kubeconfigEnv: [a, b].join(path.delimiter) }
    },
  },
  {
    name: 'exec v1: a token',
    setup: async (dir) => {
      const command = await plugin(dir, 'v1.sh', V1, '{"token":"from-exec"}')
      return { file: await write(path.join(dir, 'config'), config({}, { exec: { apiVersion: V1, command, interactiveMode: 'Never' } })) }
    },
  },
  {
    name: 'exec v1beta1: a client certificate',
    setup: async (dir) => {
      const command = await plugin(dir, 'beta.sh', V1BETA1, JSON.stringify({ clientCertificateData: CERT, clientKeyData: KEY }))
      return { file: await write(path.join(dir, 'config'), config({}, { exec: { apiVersion: V1BETA1, command } })) }
    },
  },
  {
    name: 'exec with args and env',
    setup: async (dir) => {
      const command = await write(
        path.join(dir, 'echo.sh'),
        `#!/bin/sh\nprintf '{"apiVersion":"${V1}","kind":"ExecCredential","status":{"token":"%s-%s"}}' "$1" "$TEAM"\n`,
        0o755,
      )
      return {
        file: await write(
          path.join(dir, 'config'),
          config(
            {},
            { exec: { apiVersion: V1, command, args: ['arg1'], env: [{ name: 'TEAM', value: 'blue' }], interactiveMode: 'IfAvailable' } },
          ),
        ),
      }
    },
  },
  {
    name: 'in-cluster: service-account token, CA and namespace, KUBERNETES_SERVICE_HOST/PORT',
    setup: async (dir) => {
      const sa = path.join(dir, 'var/run/secrets/kubernetes.io/serviceaccount')
      await write(path.join(sa, 'token'), 'sa-token')
      await write(path.join(sa, 'ca.crt'), CA)
      await write(path.join(sa, 'namespace'), 'crd-migrator')
      return { inCluster: { prefix: dir, env: { KUBERNETES_SERVICE_HOST: '10.96.0.1', KUBERNETES_SERVICE_PORT: '443' } } }
    },
  },

  // The intended differences (docs/configuration.md, "Differences from client-node").
  {
    name: 'DIFFERS: KUBECONFIG files that both set current-context: the first wins (kubectl), client-node takes the last',
    setup: async (dir) => {
      const a = await write(path.join(dir, 'a'), config({ server: 'https://a:6443' }, { token: 'a' }, { name: 'a' }))
      const b = await write(path.join(dir, 'b'), config({ server: 'https://b:6443' }, { token: 'b' }, { name: 'b' }))
      return { kubeconfigEnv: [a, b].join(path.delimiter) }
    },
    differs: (t, o, c) => {
      t.equal(seen(o).server, 'https://a:6443')
      t.equal(seen(c).server, 'https://b:6443')
    },
  },
  {
    name: 'DIFFERS: KUBECONFIG files defining the same name: the first wins (kubectl), client-node throws',
    setup: async (dir) => {
      const a = await write(path.join(dir, 'a'), config({ server: 'https://a:6443' }, { token: 'a' }))
      const b = await write(path.join(dir, 'b'), config({ server: 'https://b:6443' }, { token: 'b' }))
      return { kubeconfigEnv: [a, b].join(path.delimiter) }
    },
    differs: (t, o, c) => {
      t.equal(seen(o).server, 'https://a:6443')
      t.match(c, { message: /Duplicate cluster: ctx-c/ })
    },
  },
  {
    name: 'DIFFERS: tokenFile is read (kubectl); client-node reads only `token-file`, so sends no token',
    setup: async (dir) => {
      await write(path.join(dir, 'token'), 'file-token\n')
      return { file: await write(path.join(dir, 'config'), config({}, { tokenFile: 'token' })) }
    },
    differs: (t, o, c) => {
      t.equal(seen(o).headers['Authorization'], 'Bearer file-token')
      t.equal(seen(c).headers['Authorization'], undefined)
    },
  },
  {
    name: 'DIFFERS: as-groups, as-uid, as-user-extra are sent (kubectl); client-node sends Impersonate-User only',
    setup: async (dir) => ({
      file: await write(
        path.join(dir, 'config'),
        config({}, { token: 't', as: 'alice', 'as-uid': '42', 'as-groups': ['devs', 'ops'], 'as-user-extra': { scopes: ['view'] } }),
      ),
    }),
    differs: (t, o, c) => {
      t.same(seen(o).headers, {
        Authorization: 'Bearer t',
        'Impersonate-User': 'alice',
        'Impersonate-Uid': '42',
        'Impersonate-Group': 'devs, ops',
        'Impersonate-Extra-scopes': 'view',
      })
      t.same(seen(c).headers, { Authorization: 'Bearer t', 'Impersonate-User': 'alice' })
    },
  },
  {
    name: 'DIFFERS: an exec command with a `/` is relative to the kubeconfig (kubectl); client-node runs it from the working directory',
    setup: async (dir) => {
      await plugin(path.join(dir, 'bin'), 'rel.sh', V1, '{"token":"relative"}')
      return {
        file: await write(
          path.join(dir, 'config'),
          config({}, { exec: { apiVersion: V1, command: './bin/rel.sh', interactiveMode: 'Never' } }),
        ),
      }
    },
    differs: (t, o, c) => {
      t.equal(seen(o).headers['Authorization'], 'Bearer relative')
      t.ok(c instanceof Error, 'client-node does not find ./bin/rel.sh from the working directory')
    },
  },
  {
    name: 'DIFFERS: exec provideClusterInfo and interactiveMode reach the plugin in KUBERNETES_EXEC_INFO (kubectl); client-node sets none',
    setup: async (dir) => {
      const command = await plugin(dir, 'info.sh', V1, '{"token":"t"}')
      return {
        file: await write(
          path.join(dir, 'config'),
          config(
            {
              'certificate-authority-data': b64(CA),
              extensions: [{ name: 'client.authentication.k8s.io/exec', extension: { audience: 'k8s' } }],
            },
            { exec: { apiVersion: V1, command, provideClusterInfo: true, interactiveMode: 'IfAvailable' } },
          ),
        ),
      }
    },
    differs: async (t, o, c, dir) => {
      t.same(seen(o).headers, seen(c).headers, 'the same token either way')
      // Both ran the same plugin; ours ran first (it is read first), client-node's run overwrote the file.
      t.equal(await readFile(path.join(dir, 'info.sh.info.json'), 'utf8'), '', "client-node's run got no KUBERNETES_EXEC_INFO")
      await ours(await SHAPES.find((s) => s.name.startsWith('DIFFERS: exec provideClusterInfo'))!.setup(dir))
      const info = JSON.parse(await readFile(path.join(dir, 'info.sh.info.json'), 'utf8')) as { spec: Record<string, unknown> }
      t.same(info.spec, {
        interactive: false,
        cluster: { server: 'https://api.example.com:6443', 'certificate-authority-data': b64(CA), config: { audience: 'k8s' } },
      })
    },
  },
  {
    name: 'DIFFERS: insecure-skip-tls-verify with a CA is refused (kubectl refuses it); client-node takes both',
    setup: async (dir) => ({
      file: await write(
        path.join(dir, 'config'),
        config({ 'insecure-skip-tls-verify': true, 'certificate-authority-data': b64(CA) }, { token: 't' }),
      ),
    }),
    differs: (t, o, c) => {
      t.match(o, {
        code: 'CRDM_KUBECONFIG',
        message: /context "ctx" cannot be used: .*insecure-skip-tls-verify and a certificate-authority/,
      })
      t.match(seen(c), { insecure: true, ca: CA })
    },
  },
  {
    name: 'DIFFERS: a socks5 proxy-url is refused, naming the entry, for the context in use only; client-node tunnels through it',
    setup: async (dir) => ({
      file: await write(path.join(dir, 'config'), config({ 'proxy-url': 'socks5://bastion:1080' }, { token: 't' })),
    }),
    differs: (t, o, c) => {
      t.match(o, {
        code: 'CRDM_KUBECONFIG',
        message: /context "ctx" cannot be used: .*cluster "ctx-c": proxy-url "socks5:\/\/bastion:1080"/,
      })
      t.equal(seen(c).proxy, 'socks5://bastion:1080')
    },
  },
  {
    name: 'DIFFERS: a gcp auth-provider is refused for the context in use (kubectl 1.26+); client-node runs gcloud',
    setup: async (dir) => ({
      file: await write(
        path.join(dir, 'config'),
        config({}, { 'auth-provider': { name: 'gcp', config: { 'access-token': 'ya29.x', expiry: '2999-01-01T00:00:00Z' } } }),
      ),
    }),
    differs: (t, o, c) => {
      t.match(o, { code: 'CRDM_KUBECONFIG', message: /auth-provider "gcp" is not supported/ })
      t.equal(seen(c).headers['Authorization'], 'Bearer ya29.x', 'client-node uses the cached access-token')
    },
  },
]

t.test(`${SHAPES.length} kubeconfig shapes: ours and client-node's KubeConfig agree, or differ as documented`, async (t) => {
  t.ok(SHAPES.filter((s) => !s.differs).length >= 20, 'at least 20 shapes read alike')
  for (const shape of SHAPES) {
    await t.test(shape.name, async (t) => {
      const dir = await tempDir()
      const source = await shape.setup(dir)
      const o = await outcome(() => ours(source))
      const c = await outcome(() => theirs(source))
      if (shape.differs) return shape.differs(t, o, c, dir)
      t.same(seen(o), seen(c), 'the same server, CA, client certificate, headers, TLS and proxy settings, namespace')
    })
  }
})
