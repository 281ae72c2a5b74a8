//! The routes of the HTTP API as a type: a path is parsed once into a [`Route`], handlers
//! `match` on it exhaustively (a new variant does not compile until it is answered), and
//! every list of routes (the 404 text, the probe port's routes, the OpenAPI paths checked by
//! the test below) is derived from [`Route::ALL`].
//!
//! To add a route: add a variant and its arms here (the compiler names them), answer it in
//! `Api::route` ([`super::routes`]), describe it in `sidecar/openapi.yaml` (the test below
//! fails until you do) and in the table of [`crate::http`].

/// This API's description (OpenAPI 3), served at `/openapi.yaml` ([`Route::OpenApi`]) so
/// a client team can fetch it from a running pod. `scripts/check-openapi.sh` fuzzes the
/// server against it; the test below checks its paths against [`Route::ALL`].
pub const OPENAPI_YAML: &str = include_str!("../../openapi.yaml");

/// One route of the API, with what its path carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route<'a> {
    /// `GET /id`
    Id,
    /// `GET /ids?count=N`
    Ids,
    /// `GET /decode/<id>`, with the text after `/decode/` (possibly empty).
    Decode(&'a str),
    /// `GET /healthz`
    Healthz,
    /// `GET /readyz`
    Readyz,
    /// `GET /metrics`
    Metrics,
    /// `GET /openapi.yaml`
    OpenApi,
}

impl Route<'static> {
    /// Every route, in the order the 404 text lists them (`Decode` with a placeholder).
    pub const ALL: [Route<'static>; 7] = [
        Route::Id,
        Route::Ids,
        Route::Decode("<id>"),
        Route::Healthz,
        Route::Readyz,
        Route::Metrics,
        Route::OpenApi,
    ];
}

impl<'a> Route<'a> {
    /// The route of `path` (the path only, without the query), if any.
    pub fn parse(path: &'a str) -> Option<Route<'a>> {
        Route::ALL
            .into_iter()
            .find(|r| !matches!(r, Route::Decode(_)) && r.path() == path)
            .or_else(|| path.strip_prefix("/decode/").map(Route::Decode))
    }

    /// The path as served (for `Decode`, its prefix and a placeholder).
    fn path(&self) -> &'static str {
        match self {
            Route::Id => "/id",
            Route::Ids => "/ids",
            Route::Decode(_) => "/decode/<id>",
            Route::Healthz => "/healthz",
            Route::Readyz => "/readyz",
            Route::Metrics => "/metrics",
            Route::OpenApi => "/openapi.yaml",
        }
    }

    /// How the route is shown to a caller who asked for another one.
    fn usage(&self) -> &'static str {
        match self {
            Route::Ids => "/ids?count=N",
            other => other.path(),
        }
    }

    /// The route's path template in the OpenAPI document.
    pub fn openapi_path(&self) -> &'static str {
        match self {
            Route::Decode(_) => "/decode/{id}",
            other => other.path(),
        }
    }

    /// The `route` label of the request metrics.
    pub fn label(&self) -> &'static str {
        match self {
            Route::Id => "id",
            Route::Ids => "ids",
            Route::Decode(_) => "decode",
            Route::Healthz => "healthz",
            Route::Readyz => "readyz",
            Route::Metrics => "metrics",
            Route::OpenApi => "openapi",
        }
    }

    /// Also served on the probe port (`--probe-listen`, the pod IP): the probes and the
    /// metrics, which carry no IDs ([`super::serve::ProbeRoutes`]).
    pub fn on_probe_port(&self) -> bool {
        match self {
            Route::Healthz | Route::Readyz | Route::Metrics => true,
            Route::Id | Route::Ids | Route::Decode(_) | Route::OpenApi => false,
        }
    }
}

/// `a, b, c <last> d`: the usages of `routes` as a sentence.
fn sentence<'r>(routes: impl Iterator<Item = &'r Route<'static>>, last: &str) -> String {
    let usages: Vec<&str> = routes.map(Route::usage).collect();
    match usages.split_last() {
        Some((end, [])) => (*end).to_string(),
        Some((end, rest)) => format!("{} {last} {end}", rest.join(", ")),
        None => String::new(),
    }
}

/// Every route, as the 404 of the API lists them.
pub fn all_routes_text() -> String {
    sentence(Route::ALL.iter(), "or")
}

/// The probe port's routes, as its 404 lists them.
pub fn probe_routes_text() -> String {
    sentence(Route::ALL.iter().filter(|r| r.on_probe_port()), "and")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_parse_to_their_route_and_nothing_else_does() {
        for route in Route::ALL {
            let path = match route {
                Route::Decode(_) => "/decode/123",
                other => other.path(),
            };
            let parsed = Route::parse(path).unwrap();
            assert_eq!(parsed.label(), route.label(), "{path}");
        }
        assert_eq!(Route::parse("/decode/"), Some(Route::Decode("")));
        assert_eq!(Route::parse("/decode/7/x"), Some(Route::Decode("7/x")));
        for path in ["/", "/decode", "/id/", "/ids/x", "/ID", "/openapi.json", ""] {
            assert_eq!(Route::parse(path), None, "{path}");
        }
    }

    #[test]
    fn the_route_lists_read_as_before() {
        assert_eq!(
            all_routes_text(),
            "/id, /ids?count=N, /decode/<id>, /healthz, /readyz, /metrics or /openapi.yaml"
        );
        assert_eq!(probe_routes_text(), "/healthz, /readyz and /metrics");
    }

    /// The OpenAPI document (`sidecar/openapi.yaml`; `docs/openapi.yaml` links to it)
    /// describes exactly the routes served, no more, no fewer.
    #[test]
    fn the_openapi_paths_are_the_routes_served() {
        let doc: serde_json::Value = serde_saphyr::from_str(OPENAPI_YAML).expect("openapi.yaml");
        let mut documented: Vec<&str> = doc["paths"]
            .as_object()
            .expect("paths")
            .keys()
            .map(String::as_str)
            .collect();
        let mut served: Vec<&str> = Route::ALL.iter().map(Route::openapi_path).collect();
        documented.sort_unstable();
        served.sort_unstable();
        assert_eq!(documented, served);
        // Every route answers GET only (anything else is a 405).
        let methods = ["put", "post", "delete", "options", "head", "patch", "trace"];
        for (path, item) in doc["paths"].as_object().unwrap() {
            assert!(item.get("get").is_some(), "{path} has no get");
            for method in methods {
                assert!(item.get(method).is_none(), "{path} documents {method}");
            }
        }
    }
}
