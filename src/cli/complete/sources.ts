/**
 * The candidates only the kubeconfig or the cluster knows (contexts; CRD names, managed first),
 * read with the options given earlier on the line, the environment and the config file, as the command would.
 */
import { homedir } from 'node:os'
import { configFromOptions } from '../command-kit.js'
import { closing } from '../command-http.js'
import type { Config } from '../../config/schema.js'
import { CrdSelection } from '../../select/selector.js'
import { kubeHttp, readKubeconfigs } from '../../kube/client.js'
import { usable } from '../../kube/kubeconfig.js'
import { Accept } from '../../kube/http.js'
import { listPages } from '../../kube/list-pages.js'
import { CRD_API } from '../../kube/paths.js'
import type { PartialObjectMetadata } from '../../kube/types.js'
import { userAgent } from '../../version.js'
import type { Candidate, Lookup } from './candidates.js'

/** How long a look-up may take: a shell waits on it while the user waits on the shell. */
const LOOKUP_TIMEOUT_MS = 2500

/** The options that say where the cluster is and which CRDs are managed; others on the line cannot spoil a look-up. */
const LOOKUP_OPTIONS = ['config', 'kubeconfig', 'context', 'selector', 'crds'] as const

export interface LookupOptions {
  env?: NodeJS.ProcessEnv
  timeoutMs?: number
}

export async function lookupCandidates(
  lookup: Lookup,
  given: Record<string, string | string[] | boolean>,
  options: LookupOptions = {},
): Promise<Candidate[]> {
  const env = options.env ?? process.env
  const picked: Record<string, unknown> = {}
  for (const key of LOOKUP_OPTIONS) if (typeof given[key] === 'string') picked[key] = shellPath(given[key], key)
  const config = configFromOptions(picked, env)
  return lookup.kind === 'contexts'
    ? contextCandidates(config, env)
    : crdCandidates(config, lookup.named, options.timeoutMs ?? LOOKUP_TIMEOUT_MS)
}

/** The word as the shell would pass it: one level of quotes off, and `~/` at the start of a path expanded. */
function shellPath(word: string, key: string): string {
  const unquoted = /^'[^']*'$|^"[^"]*"$/.test(word) ? word.slice(1, -1) : word
  return (key === 'config' || key === 'kubeconfig') && unquoted.startsWith('~/') ? homedir() + unquoted.slice(1) : unquoted
}

function contextCandidates(config: Config, env: NodeJS.ProcessEnv): Candidate[] {
  const kubeconfig = readKubeconfigs(config.kubeconfig, { env })
  if (!kubeconfig) return []
  return [...kubeconfig.contexts].map(([name, entry]) => {
    const cluster = usable(entry)?.cluster
    const parts = [name === kubeconfig.currentContext ? 'current' : '', cluster ? `cluster ${cluster}` : ''].filter(Boolean)
    return { value: name, description: parts.join(', ') }
  })
}

/** Every CRD's name (metadata only, one list), managed ones first, each group in name order; those named already left out. */
async function crdCandidates(config: Config, named: readonly string[], timeoutMs: number): Promise<Candidate[]> {
  const selection = new CrdSelection(config.migrator.selector)
  const http = kubeHttp(config.kubeconfig, {
    context: config.context,
    userAgent: userAgent('complete'),
    connectAttempts: 1,
    connectTimeoutMs: timeoutMs,
    defaultTimeoutMs: timeoutMs,
  })
  const signal = AbortSignal.timeout(timeoutMs)
  return closing(http, async () => {
    const crds: PartialObjectMetadata[] = []
    const list = async () => {
      for await (const page of listPages<PartialObjectMetadata>(http, CRD_API, {
        pageSize: 500,
        accept: Accept.partialObjectMetadataList,
        signal,
      }))
        crds.push(...page.items)
    }
    // Credentials (an exec plugin) may not heed the signal: the deadline holds whatever waits.
    await Promise.race([
      list(),
      new Promise<never>((_, reject) => signal.addEventListener('abort', () => reject(signal.reason as Error), { once: true })),
    ])
    const skip = new Set(named)
    const byName = (a: PartialObjectMetadata, b: PartialObjectMetadata) => a.metadata.name.localeCompare(b.metadata.name)
    const left = crds.filter((c) => !skip.has(c.metadata.name)).sort(byName)
    return [
      ...left.filter((c) => selection.selects(c)).map((c) => ({ value: c.metadata.name, description: 'managed' })),
      ...left.filter((c) => !selection.selects(c)).map((c) => ({ value: c.metadata.name })),
    ]
  })
}
