/**
 * Reading kubeconfigs the way kubectl does (src/kube/kubeconfig.ts, src/kube/client.ts):
 * fields, relative paths, merging, choosing the context, in-cluster, and the errors.
 * What the API server makes of the result is test/integration/kubeconfig.test.ts.
 */
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises'
import os from 'node:os'
import path from 'node:path'
import { KubeConfig } from '@kubernetes/client-node'
import t from 'tap'
import { stringify } from 'yaml'
import { loadKubeConfig } from '../../src/kube/client.js'
import { KubeHttp } from '../../src/kube/http.js'
import { mergeKubeconfigs, parseKubeconfig, resolveContext, usable } from '../../src/kube/kubeconfig.js'

const b64 = (s: string) => Buffer.from(s).toString('base64')

async function tempDir(): Promise<string> {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'crd-migrator-kubeconfig-unit-'))
  t.teardown(() => rm(dir, { recursive: true, force: true }))
  return dir
}

/** A kubeconfig of one context `name` (cluster and user of the same name). */
function oneContext(name: string, cluster: Record<string, unknown>, user: Record<string, unknown> = { token: 't' }, current = true) {
  return {
    apiVersion: 'v1',
    kind: 'Config',
    clusters: [{ name, cluster: { server: `https://${name}.example.com:6443`, ...cluster } }],
    users: [{ name, user }],
    contexts: [{ name, context: { cluster: name, user: name } }],
    ...(current ? { 'current-context': name } : {}),
  }
}

t.test('fields: data decoded, relative paths against the kubeconfig, exec command, defaults', async (t) => {
  const config = parseKubeconfig(
    stringify({
      ...oneContext(
        'a',
        { 'certificate-authority': 'ca.crt', 'tls-server-name': 'kubernetes.default', 'proxy-url': 'http://proxy:3128' },
        {
          'client-certificate': 'certs/client.crt',
          'client-key': '/abs/client.key',
          exec: {
            apiVersion: 'client.authentication.k8s.io/v1',
            command: './bin/plugin',
            args: ['get-token'],
            env: [{ name: 'A', value: '1' }],
          },
        },
      ),
      users: [
        {
          name: 'a',
          user: {
            'client-certificate': 'certs/client.crt',
            'client-key': '/abs/client.key',
            as: 'alice',
            'as-groups': ['devs', 'ops'],
            exec: {
              apiVersion: 'client.authentication.k8s.io/v1',
              command: './bin/plugin',
              args: ['get-token'],
              env: [{ name: 'A', value: '1' }],
            },
          },
        },
        { name: 'b', user: { exec: { apiVersion: 'client.authentication.k8s.io/v1beta1', command: 'gke-gcloud-auth-plugin' } } },
        { name: 'c', user: { 'client-certificate-data': b64('CERT'), 'client-key-data': b64('KEY'), tokenFile: 'token' } },
      ],
    }),
    '/home/me/.kube/config',
  )
  const ctx = resolveContext(config)
  t.equal(ctx.name, 'a')
  t.equal(ctx.cluster.server.href, 'https://a.example.com:6443/')
  t.equal(ctx.cluster.certificateAuthority, '/home/me/.kube/ca.crt')
  t.equal(ctx.cluster.tlsServerName, 'kubernetes.default')
  t.equal(ctx.cluster.proxyUrl?.href, 'http://proxy:3128/')
  t.equal(ctx.user.clientCertificate, '/home/me/.kube/certs/client.crt')
  t.equal(ctx.user.clientKey, '/abs/client.key')
  t.same(ctx.user.impersonate, { user: 'alice', groups: ['devs', 'ops'], extra: {} })
  t.same(ctx.user.exec, {
    command: '/home/me/.kube/bin/plugin',
    args: ['get-token'],
    env: [{ name: 'A', value: '1' }],
    apiVersion: 'client.authentication.k8s.io/v1',
    interactiveMode: 'IfAvailable',
    provideClusterInfo: false,
  })
  t.equal(usable(config.users.get('b'))?.exec?.command, 'gke-gcloud-auth-plugin', 'a bare command is looked up in PATH')
  t.equal(usable(config.users.get('c'))?.clientCertificateData, 'CERT', 'base64 data decoded')
  t.equal(usable(config.users.get('c'))?.tokenFile, '/home/me/.kube/token')
})

t.test('a file that is not a kubeconfig at all fails as a whole', async (t) => {
  t.throws(() => parseKubeconfig('{ clusters: [', '/k'), { code: 'CRDM_KUBECONFIG', message: /kubeconfig \/k is not valid YAML/ })
  t.throws(() => parseKubeconfig(stringify({ clusters: 'x' }), '/k'), {
    code: 'CRDM_KUBECONFIG',
    message: /kubeconfig \/k is not a valid kubeconfig: clusters: /,
  })
})

t.test('an entry we cannot use fails the context using it, naming the context, the entry and the field', async (t) => {
  const bad: [string, unknown, RegExp][] = [
    ['no server', oneContext('a', { server: '' }), /cluster "a" is not valid: clusters\.0\.cluster\.server: /],
    ['server not a URL', oneContext('a', { server: 'not a url' }), /cluster "a": server "not a url" is not a URL/],
    [
      'socks proxy',
      oneContext('a', { 'proxy-url': 'socks5://p:1080' }),
      /cluster "a": proxy-url "socks5:\/\/p:1080": only http:\/\/ and https:\/\/ proxies are supported, not socks5/,
    ],
    [
      'insecure with a CA',
      oneContext('a', { 'insecure-skip-tls-verify': true, 'certificate-authority-data': b64('x') }),
      /cluster "a": insecure-skip-tls-verify and a certificate-authority/,
    ],
    ['bad base64', oneContext('a', { 'certificate-authority-data': '%%%' }), /cluster "a": certificate-authority-data is not base64/],
    [
      'token and password',
      oneContext('a', {}, { token: 't', username: 'u', password: 'p' }),
      /user "a": username\/password and a token cannot both be set/,
    ],
    ['certificate without key', oneContext('a', {}, { 'client-certificate': 'c.crt' }), /user "a": a client certificate needs its key/],
    [
      'exec v1alpha1',
      oneContext('a', {}, { exec: { apiVersion: 'client.authentication.k8s.io/v1alpha1', command: 'x' } }),
      /user "a": exec apiVersion "client.authentication.k8s.io\/v1alpha1" is not supported/,
    ],
    [
      'exec interactiveMode misspelt',
      oneContext('a', {}, { exec: { apiVersion: 'client.authentication.k8s.io/v1', command: 'x', interactiveMode: 'Sometimes' } }),
      /user "a" is not valid: users\.0\.user\.exec\.interactiveMode: /,
    ],
    [
      'gcp auth-provider',
      oneContext('a', {}, { 'auth-provider': { name: 'gcp', config: {} } }),
      /user "a": auth-provider "gcp" is not supported.*exec credential plugin/,
    ],
    [
      'a context without a cluster',
      { ...oneContext('a', {}), contexts: [{ name: 'a', context: { user: 'a' } }] },
      /context "a" is not valid: contexts\.0\.context\.cluster: /,
    ],
  ]
  for (const [what, doc, message] of bad) {
    const config = parseKubeconfig(stringify(doc), '/k')
    t.throws(
      () => resolveContext(config),
      { code: 'CRDM_KUBECONFIG', message: new RegExp(`^context "a" cannot be used: kubeconfig /k: ${message.source}`) },
      what,
    )
  }
  const oidc = parseKubeconfig(stringify(oneContext('a', {}, { 'auth-provider': { name: 'oidc', config: { 'id-token': 'jwt' } } })))
  t.equal(resolveContext(oidc).user.oidcIdToken, 'jwt', "the oidc auth-provider's id-token is used as it is")
})

t.test('stale entries of other contexts do not matter (kubectl judges the context in use only)', async (t) => {
  const config = parseKubeconfig(
    stringify({
      clusters: [
        { name: 'old-socks', cluster: { server: 'https://old:6443', 'proxy-url': 'socks5://bastion:1080' } },
        { name: 'broken', cluster: { 'insecure-skip-tls-verify': 'yes' } },
        { name: 'good', cluster: { server: 'https://good:6443' } },
      ],
      users: [
        { name: 'gke-legacy', user: { 'auth-provider': { name: 'gcp', config: { 'cmd-path': 'gcloud' } } } },
        { name: 'aks-legacy', user: { 'auth-provider': { name: 'azure', config: {} } } },
        { name: 'alpha', user: { exec: { apiVersion: 'client.authentication.k8s.io/v1alpha1', command: 'aws' } } },
        { name: 'me', user: { token: 't' } },
      ],
      contexts: [
        { name: 'gke', context: { cluster: 'good', user: 'gke-legacy' } },
        { name: 'aks', context: { cluster: 'good', user: 'aks-legacy' } },
        { name: 'eks', context: { cluster: 'good', user: 'alpha' } },
        { name: 'bastion', context: { cluster: 'old-socks', user: 'me' } },
        { name: 'typo', context: { cluster: 'broken', user: 'me' } },
        { name: 'good', context: { cluster: 'good', user: 'me' } },
      ],
      'current-context': 'gke',
    }),
    '/k',
  )
  t.equal(resolveContext(config, 'good').cluster.server.host, 'good:6443', 'the context in use is fine: it works')
  t.throws(() => resolveContext(config), {
    message: /^context "gke" cannot be used: kubeconfig \/k: user "gke-legacy": auth-provider "gcp" is not supported/,
  })
  t.throws(() => resolveContext(config, 'aks'), { message: /^context "aks" cannot be used: .*user "aks-legacy": auth-provider "azure"/ })
  t.throws(() => resolveContext(config, 'eks'), { message: /^context "eks" cannot be used: .*user "alpha": exec apiVersion/ })
  t.throws(() => resolveContext(config, 'bastion'), {
    message: /^context "bastion" cannot be used: .*cluster "old-socks": proxy-url "socks5:\/\/bastion:1080"/,
  })
  t.throws(() => resolveContext(config, 'typo'), {
    message:
      /^context "typo" cannot be used: .*cluster "broken" is not valid: clusters\.1\.cluster\.server: .*clusters\.1\.cluster\.insecure-skip-tls-verify: /,
  })
  const merged = mergeKubeconfigs(
    [config, parseKubeconfig(stringify(oneContext('gke-legacy', {})), '/2'), parseKubeconfig(stringify(oneContext('gke', {})), '/3')],
    'both',
  )
  t.throws(
    () => resolveContext(merged),
    { message: /user "gke-legacy": auth-provider "gcp"/ },
    'an unusable entry still claims its name in a merge',
  )
})

t.test('choosing the context', async (t) => {
  const two = parseKubeconfig(
    stringify({
      clusters: [
        { name: 'c1', cluster: { server: 'https://one:6443' } },
        { name: 'c2', cluster: { server: 'https://two:6443' } },
      ],
      users: [{ name: 'u', user: { token: 't' } }],
      contexts: [
        { name: 'one', context: { cluster: 'c1', user: 'u', namespace: 'ns1' } },
        { name: 'two', context: { cluster: 'c2' } },
        { name: 'dangling', context: { cluster: 'c3', user: 'u' } },
        { name: 'nobody', context: { cluster: 'c1', user: 'missing' } },
      ],
      'current-context': 'one',
    }),
    '/k',
  )
  t.equal(resolveContext(two).cluster.server.host, 'one:6443', 'current-context')
  t.equal(resolveContext(two).namespace, 'ns1')
  t.equal(resolveContext(two, 'two').cluster.server.host, 'two:6443', '--context wins')
  t.same(resolveContext(two, 'two').user, { name: '' }, 'a context without a user: anonymous')
  t.throws(() => resolveContext(two, 'three'), {
    code: 'CRDM_KUBECONFIG',
    message: 'context "three" (--context) is not in the kubeconfig /k; it has "one", "two", "dangling", "nobody"',
  })
  t.throws(() => resolveContext(two, 'dangling'), {
    message: 'context "dangling" names cluster "c3", which the kubeconfig /k does not define',
  })
  t.throws(() => resolveContext(two, 'nobody'), {
    message: 'context "nobody" names user "missing", which the kubeconfig /k does not define',
  })
  t.throws(() => resolveContext(parseKubeconfig('', '/empty')), {
    message: 'kubeconfig /empty has no current-context: pass --context; it defines no context',
  })
  const noCurrent = parseKubeconfig(stringify(oneContext('a', {}, {}, false)), '/k')
  t.throws(() => resolveContext(noCurrent), { message: 'kubeconfig /k has no current-context: pass --context; it has "a"' })
})

t.test('several files: the first to define a name, or current-context, wins (kubectl)', async (t) => {
  const first = parseKubeconfig(stringify({ ...oneContext('a', { server: 'https://first:6443' }), 'current-context': 'a' }), '/1')
  const second = parseKubeconfig(
    stringify({
      clusters: [
        { name: 'a', cluster: { server: 'https://second:6443' } },
        { name: 'b', cluster: { server: 'https://b:6443' } },
      ],
      users: [{ name: 'b', user: {} }],
      contexts: [{ name: 'b', context: { cluster: 'b', user: 'b' } }],
      'current-context': 'b',
    }),
    '/2',
  )
  const merged = mergeKubeconfigs([first, second], 'both')
  t.equal(merged.currentContext, 'a')
  t.equal(resolveContext(merged).cluster.server.host, 'first:6443', 'cluster a from the first file')
  t.equal(resolveContext(merged, 'b').cluster.server.host, 'b:6443', 'context b from the second')
})

t.test('loadKubeConfig: --kubeconfig, then $KUBECONFIG, then ~/.kube/config, then in-cluster', async (t) => {
  const dir = await tempDir()
  const home = path.join(dir, 'home')
  const sa = path.join(dir, 'sa')
  const write = async (file: string, doc: unknown) => {
    await mkdir(path.dirname(file), { recursive: true })
    await writeFile(file, typeof doc === 'string' ? doc : stringify(doc))
    return file
  }
  const a = await write(path.join(dir, 'a.yaml'), oneContext('a', {}))
  const b = await write(path.join(dir, 'b.yaml'), oneContext('b', {}))
  const none = { env: {}, homeDir: home, serviceAccountDir: sa }

  t.equal(loadKubeConfig(a, none).name, 'a')
  t.throws(() => loadKubeConfig(path.join(dir, 'missing'), none), { message: `kubeconfig ${path.join(dir, 'missing')} does not exist` })
  const listed = { ...none, env: { KUBECONFIG: [path.join(dir, 'missing'), b, a].join(path.delimiter) } }
  t.equal(loadKubeConfig(undefined, listed).name, 'b', 'KUBECONFIG: missing files skipped, the first current-context')
  t.equal(loadKubeConfig(undefined, { ...listed, context: 'a' }).name, 'a', 'the others merged in')
  t.throws(() => loadKubeConfig(undefined, { ...none, env: { KUBECONFIG: path.join(dir, 'missing') } }), {
    message: `none of the files in KUBECONFIG exists: ${path.join(dir, 'missing')}`,
  })
  t.throws(() => loadKubeConfig(undefined, none), { code: 'CRDM_KUBECONFIG', message: /no Kubernetes cluster configured/ })

  await write(path.join(home, '.kube', 'config'), oneContext('home', {}))
  t.equal(loadKubeConfig(undefined, none).name, 'home', '~/.kube/config')
  await rm(path.join(home, '.kube'), { recursive: true })

  await write(path.join(sa, 'token'), 'x')
  t.throws(() => loadKubeConfig(undefined, none), { message: /KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set/ })
  await writeFile(path.join(sa, 'namespace'), 'crd-migrator\n')
  const inCluster = loadKubeConfig(undefined, { ...none, env: { KUBERNETES_SERVICE_HOST: 'fd00::1', KUBERNETES_SERVICE_PORT: '443' } })
  t.equal(inCluster.cluster.server.href, 'https://[fd00::1]/', 'an IPv6 host in brackets')
  t.equal(inCluster.cluster.certificateAuthority, path.join(sa, 'ca.crt'))
  t.equal(inCluster.user.tokenFile, path.join(sa, 'token'), 'the token is a file, read again as it rotates')
  t.equal(inCluster.namespace, 'crd-migrator')
  t.throws(
    () => loadKubeConfig(undefined, { ...none, context: 'x', env: { KUBERNETES_SERVICE_HOST: 'h', KUBERNETES_SERVICE_PORT: '443' } }),
    {
      message: /context "x" \(--context\): there is no kubeconfig here, only the in-cluster service account/,
    },
  )
})

t.test("a client-node KubeConfig (the tooling's and the tests') is read through its export", async (t) => {
  const kc = new KubeConfig()
  kc.loadFromString(
    stringify(oneContext('cn', { 'certificate-authority-data': b64('CA'), 'tls-server-name': 'api' }, { token: 'tok', as: 'bob' })),
  )
  const http = new KubeHttp(kc)
  t.teardown(() => http.close())
  t.equal(http.server.href, 'https://cn.example.com:6443/')
  t.equal(http.context.cluster.certificateAuthorityData, 'CA')
  t.equal(http.context.cluster.tlsServerName, 'api')
  t.equal(http.context.user.token, 'tok')
})
