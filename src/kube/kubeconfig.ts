/**
 * A kubeconfig read as kubectl reads it: files merged, paths absolute, one context chosen; only what the context in use
 * needs can fail (client-go's ConfirmUsable). Our own reader: client-node's KubeConfig loads its whole API (docs/configuration.md).
 */
import { dirname, isAbsolute, join } from 'node:path'
import { isIP } from 'node:net'
import { parse as parseYaml } from 'yaml'
import { z } from 'zod'
import { CrdMigratorError, errorMessage } from '../errors.js'

/** `client.authentication.k8s.io` versions of exec credential plugins we speak. */
export const EXEC_API_VERSIONS = ['client.authentication.k8s.io/v1', 'client.authentication.k8s.io/v1beta1'] as const
/** The cluster extension handed to exec plugins with provideClusterInfo (as client-go does). */
const EXEC_CLUSTER_EXTENSION = 'client.authentication.k8s.io/exec'

export interface KubeCluster {
  name: string
  server: URL
  /** PEM of the CA, or the absolute path of a file holding it (data wins, as in kubectl). */
  certificateAuthorityData?: string
  certificateAuthority?: string
  insecureSkipTlsVerify: boolean
  tlsServerName?: string
  proxyUrl?: URL
  /** The `client.authentication.k8s.io/exec` extension, passed to exec plugins that ask for cluster info. */
  execExtension?: unknown
}

export interface KubeExec {
  /** Absolute when the kubeconfig gave a relative path (`./bin/plugin`); a bare name is looked up in PATH. */
  command: string
  args: string[]
  env: { name: string; value: string }[]
  apiVersion: (typeof EXEC_API_VERSIONS)[number]
  interactiveMode: 'Never' | 'IfAvailable' | 'Always'
  provideClusterInfo: boolean
  installHint?: string
}

export interface KubeUser {
  name: string
  /** PEM data, or absolute paths of files re-read as they rotate (data wins). */
  clientCertificateData?: string
  clientKeyData?: string
  clientCertificate?: string
  clientKey?: string
  token?: string
  /** Absolute path of a token file, re-read (the in-cluster service-account token rotates). */
  tokenFile?: string
  username?: string
  password?: string
  exec?: KubeExec
  /** The oidc auth-provider's id-token, used as a bearer token (not refreshed). */
  oidcIdToken?: string
  impersonate?: { user?: string; uid?: string; groups: string[]; extra: Record<string, string[]> }
}

/** One resolved context: the cluster to talk to and who to be. */
export interface KubeContext {
  name: string
  cluster: KubeCluster
  user: KubeUser
  namespace?: string
  /** Where it came from, for messages: `kubeconfig /home/me/.kube/config`. */
  origin: string
}

/** An entry we cannot use (SOCKS proxy, gcp auth-provider, exec v1alpha1...), kept with why so it fails only a context using it. */
export interface Unusable {
  /** What is wrong, naming the file, the entry and the field. */
  unusable: string
}

export interface KubeContextEntry {
  cluster: string
  user: string
  namespace?: string
}

/** One or several kubeconfig files, merged. An entry that cannot be used still claims its name. */
export interface Kubeconfig {
  clusters: Map<string, KubeCluster | Unusable>
  users: Map<string, KubeUser | Unusable>
  contexts: Map<string, KubeContextEntry | Unusable>
  currentContext?: string
  origin: string
}

export function usable<T extends object>(entry: T | Unusable | undefined): T | undefined {
  return entry === undefined || 'unusable' in entry ? undefined : entry
}

const text = z.string()
const optionalText = text.nullish()
const list = <T extends z.ZodType>(item: T) => z.array(item).nullish()

const ClusterSchema = z.looseObject({
  server: text.min(1),
  'certificate-authority': optionalText,
  'certificate-authority-data': optionalText,
  'insecure-skip-tls-verify': z.boolean().nullish(),
  'tls-server-name': optionalText,
  'proxy-url': optionalText,
  extensions: list(z.looseObject({ name: text, extension: z.unknown() })),
})

const UserSchema = z.looseObject({
  'client-certificate': optionalText,
  'client-certificate-data': optionalText,
  'client-key': optionalText,
  'client-key-data': optionalText,
  token: optionalText,
  tokenFile: optionalText,
  username: optionalText,
  password: optionalText,
  as: optionalText,
  'as-uid': optionalText,
  'as-groups': list(text),
  'as-user-extra': z.record(text, z.array(text)).nullish(),
  'auth-provider': z.looseObject({ name: text, config: z.record(text, text).nullish() }).nullish(),
  exec: z
    .looseObject({
      command: text.min(1),
      args: list(text),
      env: list(z.looseObject({ name: text.min(1), value: text })),
      apiVersion: text,
      installHint: optionalText,
      provideClusterInfo: z.boolean().nullish(),
      interactiveMode: z.enum(['Never', 'IfAvailable', 'Always']).nullish(),
    })
    .nullish(),
})

const ContextSchema = z.looseObject({ cluster: text.min(1), user: optionalText, namespace: optionalText })

/** Only the file's shape; entries are judged on their own ({@link readEntries}). */
const FileSchema = z.looseObject({
  clusters: list(z.unknown()),
  users: list(z.unknown()),
  contexts: list(z.unknown()),
  'current-context': optionalText,
})

type FileUser = z.infer<typeof UserSchema>
/** A kubeconfig path made absolute against the file's directory; undefined when unset. */
type ResolvePath = (p: string | null | undefined) => string | undefined

/** A kubeconfig, or a file or plugin it names, that cannot be used: every CRDM_KUBECONFIG of src/kube. */
const fail = (message: string, cause?: unknown) => new CrdMigratorError('CRDM_KUBECONFIG', message, cause === undefined ? {} : { cause })
export { fail as kubeconfigError }

/** Relative paths in it (CA, certificates, keys, tokens, an exec command with a `/`) are relative to `file`'s directory. */
export function parseKubeconfig(source: string, file?: string): Kubeconfig {
  const origin = file ? `kubeconfig ${file}` : 'kubeconfig'
  let doc: unknown
  try {
    doc = parseYaml(source)
  } catch (err) {
    throw fail(`${origin} is not valid YAML: ${errorMessage(err)}`, err)
  }
  const parsed = FileSchema.safeParse(doc ?? {})
  if (!parsed.success) {
    const issues = parsed.error.issues.map((i) => `${i.path.map(String).join('.') || '(top level)'}: ${i.message}`)
    throw fail(`${origin} is not a valid kubeconfig: ${issues.join('; ')}`)
  }
  const data = parsed.data
  const dir = file ? dirname(file) : undefined
  const path: ResolvePath = (p) => (p ? (dir && !isAbsolute(p) ? join(dir, p) : p) : undefined)
  const config: Kubeconfig = { clusters: new Map(), users: new Map(), contexts: new Map(), origin }
  readEntries(data.clusters, 'cluster', ClusterSchema, origin, config.clusters, (name, cluster, where) =>
    clusterFrom(name, cluster, where, path),
  )
  readEntries(data.users, 'user', UserSchema.nullish(), origin, config.users, (name, user, where) =>
    userFrom(name, user ?? {}, where, path),
  )
  readEntries(data.contexts, 'context', ContextSchema, origin, config.contexts, (_name, context) => ({
    cluster: context.cluster,
    user: context.user ?? '',
    ...definedOnly({ namespace: context.namespace || undefined }),
  }))
  if (data['current-context']) config.currentContext = data['current-context']
  return config
}

/** One list's entries, each on its own: the first of a name wins, unusable ones kept as {@link Unusable}, nameless ones dropped. */
function readEntries<S extends z.ZodType, T extends object>(
  entries: readonly unknown[] | null | undefined,
  kind: 'cluster' | 'user' | 'context',
  schema: S,
  origin: string,
  into: Map<string, T | Unusable>,
  build: (name: string, body: z.infer<S>, where: string) => T,
): void {
  for (const [index, entry] of (entries ?? []).entries()) {
    const name = (entry as { name?: unknown } | null)?.name
    if (typeof name !== 'string' || name === '' || into.has(name)) continue
    const where = `${origin}: ${kind} ${JSON.stringify(name)}`
    const body = schema.safeParse((entry as Record<string, unknown>)[kind])
    if (!body.success) {
      const issues = body.error.issues.map((i) => `${[`${kind}s`, index, kind, ...i.path].map(String).join('.')}: ${i.message}`)
      into.set(name, { unusable: `${where} is not valid: ${issues.join('; ')}` })
      continue
    }
    try {
      into.set(name, build(name, body.data, where))
    } catch (err) {
      if (!(err instanceof CrdMigratorError)) throw err
      into.set(name, { unusable: err.message })
    }
  }
}

function clusterFrom(name: string, cluster: z.infer<typeof ClusterSchema>, where: string, path: ResolvePath): KubeCluster {
  const c: KubeCluster = {
    name,
    server: httpUrl(cluster.server, where, 'server', 'https://10.0.0.1:6443', () => ' must be https:// (or http://)'),
    ...definedOnly({
      certificateAuthorityData: decodeBase64(cluster['certificate-authority-data'], `${where}: certificate-authority-data`),
      certificateAuthority: path(cluster['certificate-authority']),
      tlsServerName: cluster['tls-server-name'] || undefined,
      // Node's built-in proxy support tunnels through http(s) proxies; SOCKS would need a library.
      proxyUrl: cluster['proxy-url']
        ? httpUrl(
            cluster['proxy-url'],
            where,
            'proxy-url',
            'http://proxy.example.com:3128',
            (scheme) => `: only http:// and https:// proxies are supported, not ${scheme}`,
          )
        : undefined,
      execExtension: cluster.extensions?.find((e) => e.name === EXEC_CLUSTER_EXTENSION)?.extension,
    }),
    insecureSkipTlsVerify: cluster['insecure-skip-tls-verify'] === true,
  }
  if (c.insecureSkipTlsVerify && (c.certificateAuthority || c.certificateAuthorityData)) {
    throw fail(`${where}: insecure-skip-tls-verify and a certificate-authority cannot both be set (kubectl refuses it too)`)
  }
  return c
}

function userFrom(name: string, u: FileUser, where: string, path: ResolvePath): KubeUser {
  const user: KubeUser = {
    name,
    ...definedOnly({
      clientCertificateData: decodeBase64(u['client-certificate-data'], `${where}: client-certificate-data`),
      clientKeyData: decodeBase64(u['client-key-data'], `${where}: client-key-data`),
      clientCertificate: path(u['client-certificate']),
      clientKey: path(u['client-key']),
      token: u.token || undefined,
      tokenFile: path(u.tokenFile),
      username: u.username ?? undefined,
      password: u.password ?? undefined,
    }),
  }
  if ((user.username !== undefined || user.password !== undefined) && (user.token || user.tokenFile)) {
    throw fail(`${where}: username/password and a token cannot both be set`)
  }
  const hasCert = user.clientCertificate !== undefined || user.clientCertificateData !== undefined
  const hasKey = user.clientKey !== undefined || user.clientKeyData !== undefined
  if (hasCert !== hasKey) throw fail(`${where}: a client certificate needs its key, and a key its certificate`)
  if (u.as || u['as-uid'] || (u['as-groups']?.length ?? 0) > 0 || Object.keys(u['as-user-extra'] ?? {}).length > 0) {
    user.impersonate = {
      ...definedOnly({ user: u.as || undefined, uid: u['as-uid'] || undefined }),
      groups: u['as-groups'] ?? [],
      extra: u['as-user-extra'] ?? {},
    }
  }
  const provider = u['auth-provider']
  if (provider && u.exec) throw fail(`${where}: auth-provider and exec cannot both be set`)
  if (provider) {
    const idToken = provider.config?.['id-token']
    if (provider.name !== 'oidc' || !idToken) {
      throw fail(
        `${where}: auth-provider "${provider.name}" is not supported (kubectl dropped the gcp and azure ones in 1.26); ` +
          'use an exec credential plugin instead (gke-gcloud-auth-plugin, kubelogin, aws eks get-token, ...)',
      )
    }
    user.oidcIdToken = idToken
  }
  if (u.exec) {
    const e = u.exec
    const apiVersion = EXEC_API_VERSIONS.find((v) => v === e.apiVersion)
    if (!apiVersion) {
      throw fail(`${where}: exec apiVersion ${JSON.stringify(e.apiVersion)} is not supported; use one of ${EXEC_API_VERSIONS.join(', ')}`)
    }
    // client-go resolves a command with a path separator against the kubeconfig's directory; a bare name goes through PATH.
    const command = e.command.includes('/') ? (path(e.command) ?? e.command) : e.command
    user.exec = {
      command,
      args: e.args ?? [],
      env: (e.env ?? []).map(({ name: n, value }) => ({ name: n, value })),
      apiVersion,
      interactiveMode: e.interactiveMode ?? 'IfAvailable',
      provideClusterInfo: e.provideClusterInfo === true,
      ...definedOnly({ installHint: e.installHint || undefined }),
    }
  }
  return user
}

/** Several kubeconfigs as one, kubectl's way: the first file to define a name (or current-context) wins. */
export function mergeKubeconfigs(configs: readonly Kubeconfig[], origin: string): Kubeconfig {
  const merged: Kubeconfig = { clusters: new Map(), users: new Map(), contexts: new Map(), origin }
  for (const c of configs) {
    for (const [k, v] of c.clusters) if (!merged.clusters.has(k)) merged.clusters.set(k, v)
    for (const [k, v] of c.users) if (!merged.users.has(k)) merged.users.set(k, v)
    for (const [k, v] of c.contexts) if (!merged.contexts.has(k)) merged.contexts.set(k, v)
    merged.currentContext ??= c.currentContext
  }
  return merged
}

/** The context named `requested` (--context), else current-context, with its cluster and user. */
export function resolveContext(config: Kubeconfig, requested?: string): KubeContext {
  const names = [...config.contexts.keys()]
  const known = names.length > 0 ? `; it has ${names.map((n) => JSON.stringify(n)).join(', ')}` : '; it defines no context'
  const name = requested || config.currentContext
  if (!name) throw fail(`${config.origin} has no current-context: pass --context${known}`)
  const entry = config.contexts.get(name)
  if (!entry) {
    throw fail(
      requested
        ? `context ${JSON.stringify(name)} (--context) is not in the ${config.origin}${known}`
        : `current-context ${JSON.stringify(name)} is not in the ${config.origin}${known}`,
    )
  }
  // Only what this context uses is judged (client-go's ConfirmUsable): stale entries elsewhere do not matter.
  const unusable = (what: Unusable) => fail(`context ${JSON.stringify(name)} cannot be used: ${what.unusable}`)
  if ('unusable' in entry) throw unusable(entry)
  const context = entry
  const lookup = <T extends object>(kind: 'cluster' | 'user', ref: string, entries: Map<string, T | Unusable>): T => {
    const found = entries.get(ref)
    if (!found)
      throw fail(`context ${JSON.stringify(name)} names ${kind} ${JSON.stringify(ref)}, which the ${config.origin} does not define`)
    if ('unusable' in found) throw unusable(found)
    return found
  }
  const cluster = lookup('cluster', context.cluster, config.clusters)
  const user: KubeUser = context.user ? lookup('user', context.user, config.users) : { name: '' }
  return { name, cluster, user, origin: config.origin, ...definedOnly({ namespace: context.namespace }) }
}

function httpUrl(value: string, where: string, field: string, example: string, otherScheme: (scheme: string) => string): URL {
  const said = `${where}: ${field} ${JSON.stringify(value)}`
  if (!URL.canParse(value)) throw fail(`${said} is not a URL such as ${example}`)
  const url = new URL(value)
  if (url.protocol !== 'https:' && url.protocol !== 'http:') throw fail(`${said}${otherScheme(url.protocol.replace(/:$/, ''))}`)
  return url
}

function decodeBase64(value: string | null | undefined, where: string): string | undefined {
  if (!value) return undefined
  const compact = value.replace(/\s+/g, '')
  if (!/^[A-Za-z0-9+/]*={0,2}$/.test(compact)) throw fail(`${where} is not base64`)
  return Buffer.from(compact, 'base64').toString('utf8')
}

/** `host` of a URL without IPv6 brackets, as TLS checks it. */
export function urlHost(url: URL): string {
  return url.hostname.replace(/^\[|\]$/g, '')
}

/** A TLS server name may not be an IP address (RFC 6066); those are checked against the certificate only. */
export const isServerName = (host: string): boolean => host !== '' && isIP(host) === 0

/** Optional properties stay absent, not undefined. */
function definedOnly<T extends Record<string, unknown>>(o: T): { [K in keyof T]?: Exclude<T[K], undefined> } {
  return Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined)) as { [K in keyof T]?: Exclude<T[K], undefined> }
}
