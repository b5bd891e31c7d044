/**
 * The client of one run: KubeHttp with the run's retry policy (attempts, signal and, where a phase adds them, its
 * throttle gate, retry.ts, and the conversion gate, conversion/gate.ts). Built once per run (context.ts runContext),
 * so call sites never wrap a request in a retry themselves.
 */
import type { KubeHttp, KubeRequest, KubeRequests, KubeResponse } from '../../kube/http.js'
import { listMetadata, type ListMetadataOptions, type MetadataPage } from '../../kube/list-metadata.js'
import type { ResourceRef } from '../../kube/paths.js'
import { withRetry, type RetryOptions } from './retry.js'

export class RunClient implements KubeRequests {
  constructor(
    readonly http: KubeHttp,
    private readonly policy: Readonly<RetryOptions>,
  ) {}

  /** The run's signal: it stops the retries' waits (and the lists the client reads). */
  get signal(): AbortSignal | undefined {
    return this.policy.signal
  }

  /** The same client with more of the policy: a phase's throttle gate and hooks, the run's conversion gate. */
  with(more: Omit<RetryOptions, 'maxAttempts'>): RunClient {
    return new RunClient(this.http, { ...this.policy, ...more })
  }

  /** The same policy over a transport whose every write carries dryRun=All (KubeHttp.asDryRun); close its http when done. */
  asDryRun(): RunClient {
    return new RunClient(this.http.asDryRun(), this.policy)
  }

  request<T = unknown>(req: KubeRequest): Promise<KubeResponse<T>> {
    return withRetry(() => this.http.request<T>(req), this.policy)
  }

  /** Steps retried as one, when the answer itself calls for a retry (a write stored without its managedFields, ...). */
  retry<T>(steps: () => Promise<T>): Promise<T> {
    return withRetry(steps, this.policy)
  }

  /** Each page retried, under the run's signal; a page's latency is not a write's, so it does not steer the gate's limit. */
  listMetadata(ref: ResourceRef, options: Omit<ListMetadataOptions, 'fetchPage'>): AsyncGenerator<MetadataPage> {
    const pages = this.with({ sampleLatency: false })
    return listMetadata(this.http, ref, {
      ...(this.signal ? { signal: this.signal } : {}),
      ...options,
      fetchPage: (fetch) => pages.retry(fetch),
    })
  }
}

/** The run's client: `maxAttempts` tries with the default backoff, stopped by the run's signal. */
export function runClient(ctx: { http: KubeHttp; signal?: AbortSignal | undefined }, settings: { maxAttempts: number }): RunClient {
  return new RunClient(ctx.http, { maxAttempts: settings.maxAttempts, signal: ctx.signal })
}
