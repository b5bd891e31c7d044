import { existsSync } from 'node:fs'
import { homedir } from 'node:os'
import { delimiter, join } from 'node:path'
import { isIPv6 } from 'node:net'
import { KubeHttp, type Impersonation, type KubeHttpOptions } from './http.js'
import { kubeconfigError, mergeKubeconfigs, parseKubeconfig, resolveContext, type KubeContext, type Kubeconfig } from './kubeconfig.js'
import { ConfigError } from '../errors.js'
import { MAX_CREDENTIAL_FILE_BYTES, MAX_KUBECONFIG_BYTES, readRegularFileSync } from '../regular-file.js'
import { readKubeconfigFileSync } from './credentials.js'

/** Where a pod's service-account credentials are mounted. */
export const SERVICE_ACCOUNT_DIR = '/var/run/secrets/kubernetes.io/serviceaccount'

export interface LoadKubeConfigOptions {
  /** The context to use instead of the kubeconfig's current-context (`--context`). */
  context?: string | undefined
  /** For tests: the environment ($KUBECONFIG, KUBERNETES_SERVICE_HOST/PORT), the home directory, the service-account mount. */
  env?: NodeJS.ProcessEnv
  homeDir?: string
  serviceAccountDir?: string
}

/** As kubectl: an explicit file, else $KUBECONFIG's files merged, else ~/.kube/config, else in-cluster. */
export function loadKubeConfig(file?: string, options: LoadKubeConfigOptions = {}): KubeContext {
  const config = readKubeconfigs(file, options)
  if (config) return resolveContext(config, options.context)
  const inCluster = inClusterContext(options.env ?? process.env, options.serviceAccountDir ?? SERVICE_ACCOUNT_DIR)
  if (inCluster && options.context) {
    throw kubeconfigError(
      `context ${JSON.stringify(options.context)} (--context): there is no kubeconfig here, only the in-cluster service account`,
    )
  }
  if (inCluster) return inCluster
  const home = join(options.homeDir ?? homedir(), '.kube', 'config')
  throw kubeconfigError(`no Kubernetes cluster configured: pass --kubeconfig, set KUBECONFIG, write ${home}, or run inside a cluster`)
}

/** The kubeconfig kubectl would read, all contexts (for completion); undefined when none. */
export function readKubeconfigs(
  file?: string,
  options: Omit<LoadKubeConfigOptions, 'context' | 'serviceAccountDir'> = {},
): Kubeconfig | undefined {
  const env = options.env ?? process.env
  if (file) {
    if (!existsSync(file)) throw kubeconfigError(`kubeconfig ${file} does not exist`)
    return readKubeconfig(file)
  }
  const listed = (env['KUBECONFIG'] ?? '').split(delimiter).filter((f) => f !== '')
  if (listed.length > 0) {
    // kubectl skips listed files that do not exist; one that exists must parse.
    const present = listed.filter((f) => existsSync(f))
    if (present.length === 0) {
      throw kubeconfigError(`none of the files in KUBECONFIG exists: ${listed.join(', ')}`)
    }
    const configs = present.map(readKubeconfig)
    return configs.length === 1 ? configs[0]! : mergeKubeconfigs(configs, `kubeconfig files ${present.join(', ')} (KUBECONFIG)`)
  }
  const home = join(options.homeDir ?? homedir(), '.kube', 'config')
  return existsSync(home) ? readKubeconfig(home) : undefined
}

/** Through regular-file.ts: a FIFO or device is refused at once (Tab completion's deadline cannot end a synchronous read). */
function readKubeconfig(file: string): Kubeconfig {
  const source = readKubeconfigFileSync(file, `kubeconfig ${file}`, {
    maxBytes: MAX_KUBECONFIG_BYTES,
    hint: 'name the kubeconfig file itself (a FIFO or a device is refused, never waited on or read)',
  })
  return parseKubeconfig(source.toString('utf8'), file)
}

/** client-go's InClusterConfig; the token is a file, re-read as the kubelet rotates it. Undefined outside a pod. */
export function inClusterContext(env: NodeJS.ProcessEnv, dir: string): KubeContext | undefined {
  const tokenFile = join(dir, 'token')
  if (!existsSync(tokenFile)) return undefined
  const host = env['KUBERNETES_SERVICE_HOST']
  const port = env['KUBERNETES_SERVICE_PORT']
  if (!host || !port) {
    throw kubeconfigError(
      `found a service-account token (${tokenFile}) but KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set: cannot find the API server`,
    )
  }
  const namespaceFile = join(dir, 'namespace')
  const namespace = existsSync(namespaceFile)
    ? readRegularFileSync(namespaceFile, {
        what: `the service account's namespace file ${namespaceFile}`,
        code: 'CRDM_KUBECONFIG',
        maxBytes: MAX_CREDENTIAL_FILE_BYTES,
      })
        .toString('utf8')
        .trim()
    : undefined
  const name = 'in-cluster'
  return {
    name,
    cluster: {
      name,
      server: new URL(`https://${isIPv6(host) ? `[${host}]` : host}:${port}`),
      certificateAuthority: join(dir, 'ca.crt'),
      insecureSkipTlsVerify: false,
    },
    user: { name, tokenFile },
    ...(namespace ? { namespace } : {}),
    origin: `in-cluster service account (${dir})`,
  }
}

export interface KubeHttpFactoryOptions extends KubeHttpOptions {
  /** The kubeconfig context to use instead of current-context (`--context`). */
  context?: string | undefined
  /** --as, --as-group, --as-uid: over the kubeconfig user's as, as-groups, as-uid. */
  impersonate?: Impersonation | undefined
}

export function kubeHttp(file?: string, options: KubeHttpFactoryOptions = {}): KubeHttp {
  const { context, impersonate, ...httpOptions } = options
  return new KubeHttp(withImpersonation(loadKubeConfig(file, { context }), impersonate), httpOptions)
}

/** The flags' impersonation over the user's, field by field as kubectl merges; groups or uid without a user refused, as by client-go. */
export function withImpersonation(context: KubeContext, flags: Impersonation | undefined): KubeContext {
  const given = flags && (flags.user !== undefined || flags.uid !== undefined || (flags.groups?.length ?? 0) > 0)
  if (!given) return context
  const before = context.user.impersonate
  const user = flags.user ?? before?.user
  const uid = flags.uid ?? before?.uid
  const groups = flags.groups?.length ? [...flags.groups] : (before?.groups ?? [])
  if (!user) throw new ConfigError('--as-group and --as-uid impersonate a user: name one with --as')
  return {
    ...context,
    user: {
      ...context.user,
      impersonate: { user, ...(uid ? { uid } : {}), groups, extra: before?.extra ?? {} },
    },
  }
}
