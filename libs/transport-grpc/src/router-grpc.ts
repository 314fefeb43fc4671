/**
 * `RouterService` over gRPC (`weir.router.v1.RouterService`).
 */
import { create } from '@bufbuild/protobuf';
import type { RouterService } from '@weir/core';
import { routerV1 } from '@weir/proto';
import { type GrpcClientOptions, createGrpcConnection } from './client-connection';
import { type GrpcServerBindingOptions, type GrpcServiceBinding, bindService, unaryHandler } from './server-handlers';
import { aliasFromWire, aliasToWire, callerFromWire, callerToWire, malformed, required, revisionFromWire, revisionToWire } from './wire-common';

/** The router gRPC client: the port plus `close()` for its channel. */
export interface RouterGrpcClient extends RouterService {
  /** Closes the channel; later calls fail. */
  close(): void;
}

/**
 * Hosts `impl` as `weir.router.v1.RouterService`. `model_not_found` travels as a value;
 * a thrown `WeirError` as a status with Weir trailers.
 */
export function createRouterGrpcServer(impl: RouterService, options: GrpcServerBindingOptions = {}): GrpcServiceBinding {
  const { method } = routerV1.RouterService;
  return bindService(routerV1.RouterService, {
    resolve: unaryHandler(method.resolve, options.propagator, async (request) => {
      const result = await impl.resolve(callerFromWire(request.caller), request.alias, request.stickyKey, request.useCase);
      return create(routerV1.ResolveResponseSchema, {
        result: result.ok
          ? {
              case: 'route',
              value: {
                alias: aliasToWire(result.route.alias),
                revision: revisionToWire(result.route.revision),
                fallbacks: result.route.fallbacks.map(revisionToWire),
              },
            }
          : { case: 'modelNotFound', value: { message: result.message } },
      });
    }),
    listAliases: unaryHandler(method.listAliases, options.propagator, async (request) => {
      const aliases = await impl.listAliases(callerFromWire(request.caller));
      return create(routerV1.ListAliasesResponseSchema, { aliases: aliases.map(aliasToWire) });
    }),
  });
}

/**
 * A router client over gRPC. Both calls are read-only: each attempt has the connection's
 * deadline (default 2 s) and `UNAVAILABLE` is retried (default 4 attempts). Rejects with a
 * `WeirError`: the server's own, or `upstream_unavailable` / `upstream_timeout` /
 * `internal` for transport failures.
 */
export function createRouterGrpcClient(options: GrpcClientOptions): RouterGrpcClient {
  const connection = createGrpcConnection(options, 'router');
  const { method } = routerV1.RouterService;
  return {
    async resolve(caller, alias, stickyKey, useCase) {
      const response = await connection.unary(method.resolve, { caller: callerToWire(caller), alias, stickyKey, ...(useCase !== undefined ? { useCase } : {}) });
      switch (response.result.case) {
        case 'route': {
          const route = response.result.value;
          return {
            ok: true,
            route: {
              alias: aliasFromWire(route.alias),
              revision: revisionFromWire(route.revision),
              fallbacks: route.fallbacks.map((r, i) => revisionFromWire(r, `fallbacks[${i}]`)),
            },
          };
        }
        case 'modelNotFound':
          return { ok: false, reason: 'model_not_found', message: response.result.value.message };
        case undefined:
          return malformed('ResolveResponse.result is missing');
      }
    },
    async listAliases(caller) {
      const response = await connection.unary(method.listAliases, { caller: callerToWire(caller) });
      return response.aliases.map((a) => aliasFromWire(required(a, 'alias')));
    },
    close: () => connection.close(),
  };
}
