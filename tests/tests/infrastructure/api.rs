//! The HTTP API the SAM template and the CDK construct build compared: its routes, who
//! may call each and the function it invokes, the stage's throttling.

use std::collections::BTreeSet;

use serde_json::{Value, json};

use super::Deployed;

impl Deployed {
    /// The function a route's target integration invokes, by its name.
    fn invoked(&self, target: &Value) -> String {
        let target = self.render(target);
        let integration = target
            .strip_prefix("integrations/${")
            .and_then(|t| t.strip_suffix('}'))
            .unwrap_or_else(|| panic!("{}: a route's target {target}", self.name));
        let (_, integration) = self.named(integration);
        let uri = self.render(&integration["Properties"]["IntegrationUri"]);
        uri.strip_prefix("${")
            .and_then(|u| u.strip_suffix(".Arn}"))
            .unwrap_or_else(|| panic!("{}: an integration of {uri}", self.name))
            .to_owned()
    }

    /// The API's routes, each with who may call it and the function it invokes, and
    /// the stage's throttling, with each parameter at its default.
    fn api(&self) -> Value {
        let mut routes: Vec<Value> = self
            .of_type("AWS::ApiGatewayV2::Route")
            .map(|(_, route)| {
                let p = &route["Properties"];
                json!({
                    "route": self.render(&p["RouteKey"]),
                    "function": self.invoked(&p["Target"]),
                    "authorization": self.chosen(&p["AuthorizationType"]).map(|t| self.render(t)),
                    // CDK writes no scopes as an empty list, SAM leaves them out.
                    "scopes": self
                        .chosen(&p["AuthorizationScopes"])
                        .map(|s| self.texts(s))
                        .filter(|s| !s.is_empty()),
                })
            })
            .collect();
        routes.sort_by_key(Value::to_string);
        let stages: Vec<Value> = self
            .of_type("AWS::ApiGatewayV2::Stage")
            .map(|(_, stage)| {
                let p = &stage["Properties"];
                let throttling = |settings: &Value| {
                    json!([
                        self.render(&settings["ThrottlingRateLimit"]),
                        self.render(&settings["ThrottlingBurstLimit"]),
                    ])
                };
                let per_route: serde_json::Map<String, Value> = p["RouteSettings"]
                    .as_object()
                    .into_iter()
                    .flatten()
                    .map(|(route, settings)| (route.clone(), throttling(settings)))
                    .collect();
                json!({
                    "stage": self.render(&p["StageName"]),
                    "default": throttling(&p["DefaultRouteSettings"]),
                    "routes": per_route,
                })
            })
            .collect();
        let mut reserved: Vec<String> = self
            .of_type("AWS::Lambda::Function")
            .filter_map(|(id, function)| {
                let reserved =
                    self.chosen(&function["Properties"]["ReservedConcurrentExecutions"])?;
                Some(format!("{}={}", Self::canonical(id), self.render(reserved)))
            })
            .collect();
        // The templates' resources in their names' order, whichever order each writes.
        reserved.sort();
        json!({ "routes": routes, "stages": stages, "reserved_concurrency": reserved })
    }
}

#[test]
fn the_sam_template_and_the_cdk_construct_build_the_same_api() {
    let (sam, cdk) = (Deployed::sam(), Deployed::cdk("cdk.out"));
    let api = sam.api();
    let routes = api["routes"].as_array().expect("routes");
    let deployed: BTreeSet<&str> = routes.iter().filter_map(|r| r["route"].as_str()).collect();
    let handled: Vec<String> = sas_api::ROUTES
        .iter()
        .map(|r| format!("{} {}", r.method, r.path))
        .collect();
    assert_eq!(
        deployed,
        handled.iter().map(String::as_str).collect(),
        "the gateway routes exactly what the handler answers"
    );
    for route in routes {
        let handled = sas_api::ROUTES
            .iter()
            .find(|r| route["route"] == format!("{} {}", r.method, r.path))
            .expect("a route the handler answers");
        let expected = if handled.is_public() {
            "NONE"
        } else {
            "AWS_IAM"
        };
        assert_eq!(
            route["authorization"], expected,
            "by default every route but the public ones needs IAM: {route}"
        );
        // Waits for a task's end hold an invocation each: on a function of their own,
        // they cannot take the concurrency reserved for submissions.
        let function = if handled.only_reads() {
            "ReadFunction"
        } else {
            "SubmissionFunction"
        };
        assert_eq!(route["function"], function, "{route}");
        // A route anyone may call costs an invocation a request: bounded on its own,
        // below the stage's, so that no anonymous caller can take the function's
        // reserved concurrency or run up its cost.
        if handled.is_public() {
            let throttled =
                &api["stages"][0]["routes"][route["route"].as_str().unwrap_or_default()];
            let default = &api["stages"][0]["default"];
            assert!(
                throttled.is_array() && throttled != default,
                "{route} has a throttle of its own: {throttled}"
            );
        }
    }
    let reserved = api["reserved_concurrency"]
        .as_array()
        .expect("reservations");
    for function in ["SubmissionFunction=100", "ReadFunction=100"] {
        assert!(
            reserved.iter().any(|r| r == function),
            "{function} reserved: {reserved:?}"
        );
    }
    assert_eq!(api, cdk.api(), "the API, SAM then CDK");
}
