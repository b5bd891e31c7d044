/**
 * node:http, without its ES module namespace. `import http from 'node:http'` makes Node build
 * the namespace, which reads every export, the lazy WebSocket, CloseEvent and MessageEvent
 * getters included, and they load undici: ~16 MB resident in a process that never uses it
 * (measured with Node 26: RSS after gc 64.7 MB against 47.9 MB). getBuiltinModule hands over
 * the CommonJS exports object and leaves the getters unread. Types come from
 * `import type ... from 'node:http'`, which is erased.
 */
export const http = process.getBuiltinModule('node:http')
