//! The routes of the HTTP API as a type: a path is parsed once into a [`Route`], handlers
//! `match` on it exhaustively (a new variant does not compile until it is answered), and
//! every list of routes (the 404 text, the probe port's routes, the OpenAPI paths checked by
//! [`super::openapi`]'s tests) is derived from [`Route::ALL`].
//!
//! To add a route: add a variant and its arms here (the compiler names them), answer it in
//! `Api::route` ([`super::routes`]), describe it in `sidecar/openapi.yaml` (a test of
//! [`super::openapi`] fails until you do) and in the table of [`crate::http`].

use kubeflake_crds::TextForm;

/// One route of the API, with what its path carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Route<'a> {
    /// `GET /id`
    Id,
    /// `GET /ids?count=N`
    Ids,
    /// `GET /range?count=N`: segment mode's consecutive values as `first` and `count`.
    Range,
    /// `GET /decode/<id>` (decimal), `/decode/base32/<id>` or `/decode/base62/<id>`: the
    /// form, and the text after its prefix (possibly empty). The form is in the path, not
    /// in a query, so that the OpenAPI document can say exactly which texts each accepts.
    Decode(TextForm, &'a str),
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
    pub(crate) const ALL: [Route<'static>; 10] = [
        Route::Id,
        Route::Ids,
        Route::Range,
        Route::Decode(TextForm::Decimal, "<id>"),
        Route::Decode(TextForm::Base32, "<id>"),
        Route::Decode(TextForm::Base62, "<id>"),
        Route::Healthz,
        Route::Readyz,
        Route::Metrics,
        Route::OpenApi,
    ];
}

impl<'a> Route<'a> {
    /// The route of `path` (the path only, without the query), if any.
    pub(crate) fn parse(path: &'a str) -> Option<Route<'a>> {
        Route::ALL
            .into_iter()
            .find(|r| !matches!(r, Route::Decode(..)) && r.path() == path)
            .or_else(|| {
                let rest = path.strip_prefix("/decode/")?;
                Some(
                    [TextForm::Base32, TextForm::Base62]
                        .into_iter()
                        .find_map(|form| {
                            rest.strip_prefix(form.name())
                                .and_then(|r| r.strip_prefix('/'))
                                .map(|text| Route::Decode(form, text))
                        })
                        .unwrap_or(Route::Decode(TextForm::Decimal, rest)),
                )
            })
    }

    /// The path as served (for `Decode`, its prefix and a placeholder).
    fn path(&self) -> &'static str {
        match self {
            Route::Id => "/id",
            Route::Ids => "/ids",
            Route::Range => "/range",
            Route::Decode(TextForm::Decimal, _) => "/decode/<id>",
            Route::Decode(TextForm::Base32, _) => "/decode/base32/<id>",
            Route::Decode(TextForm::Base62, _) => "/decode/base62/<id>",
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
            Route::Range => "/range?count=N",
            other => other.path(),
        }
    }

    /// The route's path template in the OpenAPI document (checked against it by the tests).
    #[cfg(test)]
    pub(crate) fn openapi_path(&self) -> &'static str {
        match self {
            Route::Decode(TextForm::Decimal, _) => "/decode/{id}",
            Route::Decode(TextForm::Base32, _) => "/decode/base32/{id}",
            Route::Decode(TextForm::Base62, _) => "/decode/base62/{id}",
            other => other.path(),
        }
    }

    /// The `route` label of the request metrics.
    pub(crate) fn label(&self) -> &'static str {
        match self {
            Route::Id => "id",
            Route::Ids => "ids",
            Route::Range => "range",
            Route::Decode(..) => "decode",
            Route::Healthz => "healthz",
            Route::Readyz => "readyz",
            Route::Metrics => "metrics",
            Route::OpenApi => "openapi",
        }
    }

    /// Also served on the probe port (`--probe-listen`, the pod IP): the probes and the
    /// metrics, which carry no IDs ([`super::serve::ProbeRoutes`]).
    pub(crate) fn on_probe_port(&self) -> bool {
        match self {
            Route::Healthz | Route::Readyz | Route::Metrics => true,
            Route::Id | Route::Ids | Route::Range | Route::Decode(..) | Route::OpenApi => false,
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
pub(crate) fn all_routes_text() -> String {
    sentence(Route::ALL.iter(), "or")
}

/// The probe port's routes, as its 404 lists them.
pub(crate) fn probe_routes_text() -> String {
    sentence(Route::ALL.iter().filter(|r| r.on_probe_port()), "and")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_parse_to_their_route_and_nothing_else_does() {
        for route in Route::ALL {
            let path = route.path().replace("<id>", "123");
            let parsed = Route::parse(&path).unwrap();
            assert_eq!(parsed.label(), route.label(), "{path}");
            assert_eq!(parsed.openapi_path(), route.openapi_path(), "{path}");
        }
        let decimal = |t| Some(Route::Decode(TextForm::Decimal, t));
        assert_eq!(Route::parse("/decode/"), decimal(""));
        assert_eq!(Route::parse("/decode/7/x"), decimal("7/x"));
        assert_eq!(Route::parse("/decode/base32"), decimal("base32"));
        assert_eq!(
            Route::parse("/decode/base32/"),
            Some(Route::Decode(TextForm::Base32, ""))
        );
        assert_eq!(
            Route::parse("/decode/base62/AzL"),
            Some(Route::Decode(TextForm::Base62, "AzL"))
        );
        for path in ["/", "/decode", "/id/", "/ids/x", "/ID", "/openapi.json", ""] {
            assert_eq!(Route::parse(path), None, "{path}");
        }
    }

    #[test]
    fn the_route_lists_read_as_before() {
        assert_eq!(
            all_routes_text(),
            "/id, /ids?count=N, /range?count=N, /decode/<id>, /decode/base32/<id>, \
             /decode/base62/<id>, /healthz, /readyz, /metrics or /openapi.yaml"
        );
        assert_eq!(probe_routes_text(), "/healthz, /readyz and /metrics");
    }
}
